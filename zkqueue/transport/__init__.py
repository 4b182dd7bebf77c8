"""Transport: the requests kazoo's API lacks or makes slow (checked multis, multiRead, prebuilt multis,
pipelining, packet limits), the poll(2) connection handler, and TLS/ACL client settings."""
