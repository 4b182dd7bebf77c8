/*
 * CuratorPeer: a command-line Curator 5.9.0 queue client for zkqueue's interop tests and benchmarks.
 *
 * Usage: CuratorPeer <command> --connect HOSTS --path P [options]
 *
 * Items cross as hex, one per line: stdin lines are "HEX" or "HEX<TAB>VALUE" (VALUE = the per-item priority,
 * delay epoch in ms, or id); stdout lines are protocol lines only:
 *   READY            the queue is started (consume, simple-take)
 *   ITEM <hex>       one consumed item, byte for byte
 *   FAIL <hex>       the consumer threw on this item (--fail-on)
 *   PUT <n>          n items were put (all committed)
 *   REJECTED <i>     put number i (0-based) timed out on a bounded queue (--max-items)
 *   REMOVED <n>      id-remove removed n items
 *   DONE <n>         consume/simple-take finished after n ITEM lines
 * Exit codes: 0 success, 1 runtime failure (details on stderr), 2 usage error.
 *
 * Every queue uses a byte-identity serializer, so the bytes written by Curator are exactly the framed input.
 * Logging (Curator, ZooKeeper) goes to stderr at WARN unless --log-level says otherwise; stdout carries nothing
 * but the protocol lines above.
 *
 * To add a command: add a case to run() and a helper method; read options through Options.
 */

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.HexFormat;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executor;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.queue.DistributedDelayQueue;
import org.apache.curator.framework.recipes.queue.DistributedIdQueue;
import org.apache.curator.framework.recipes.queue.DistributedPriorityQueue;
import org.apache.curator.framework.recipes.queue.DistributedQueue;
import org.apache.curator.framework.recipes.queue.ErrorMode;
import org.apache.curator.framework.recipes.queue.MultiItem;
import org.apache.curator.framework.recipes.queue.QueueBase;
import org.apache.curator.framework.recipes.queue.QueueBuilder;
import org.apache.curator.framework.recipes.queue.QueueConsumer;
import org.apache.curator.framework.recipes.queue.QueueSerializer;
import org.apache.curator.framework.recipes.queue.SimpleDistributedQueue;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.logging.log4j.Level;
import org.apache.logging.log4j.core.config.Configurator;
import org.apache.logging.log4j.core.config.builder.api.AppenderComponentBuilder;
import org.apache.logging.log4j.core.config.builder.api.ConfigurationBuilder;
import org.apache.logging.log4j.core.config.builder.api.ConfigurationBuilderFactory;
import org.apache.logging.log4j.core.config.builder.impl.BuiltConfiguration;

public final class CuratorPeer {
    private static final HexFormat HEX = HexFormat.of();

    /** The real stdout; System.out is pointed at stderr so no library can corrupt the protocol. */
    private static PrintStream out;
    /** The thread watching stdin for EOF, if any; interrupted before exit. */
    private static volatile Thread stdinWatcher;

    private static final String USAGE = String.join("\n",
        "usage: CuratorPeer <command> --connect HOSTS --path P [options]",
        "commands:",
        "  put        [--kind plain|priority|delay|id] [--priority N|--delay-until EPOCHMS|--id ID] [--background]",
        "             [--max-items M --put-timeout-ms T]            stdin: HEX or HEX<TAB>VALUE per line",
        "  put-multi  [--kind plain|priority|delay] [--priority N|--delay-until EPOCHMS]  all stdin items, one znode",
        "  consume    [--kind ...] [--lock-path L] [--count N] [--timeout-ms T] [--error-mode requeue|delete]",
        "             [--fail-on HEX [--fail-times K]] [--min-items-before-refresh M] [--stop-on-eof] [--quiet]",
        "  simple-offer                                              stdin: HEX per line",
        "  simple-take [--count N] [--timeout-ms T] [--stop-on-eof] [--quiet]",
        "  id-remove  --id ID [--lock-path L]",
        "  warmup                       load the classes a run needs, without a server (to dump a CDS archive)",
        "benchmarks (each times itself inside the JVM and prints one line: RESULT <json>):",
        "  bench-put     --count N [--size S] [--threads T] [--background] [--multi K] [--max-seconds X]",
        "                K>0: putMulti of K items per znode (bench-put-multi is bench-put with --multi 100)",
        "  bench-consume [--lock-path L] [--count N] [--max-seconds X]   prints READY, starts on a GO stdin line,",
        "                stops at N items, stdin EOF or X seconds; RESULT has consumed, t_go, t_first, t_last",
        "  bench-latency --rate R --duration-s D [--size S] [--drain-s X]  paced background puts + a consumer",
        "                in this JVM; RESULT has sent, received and latency percentiles in ms",
        "  bench-raw-create --count N [--size S] [--batch K] [--inflight W] [--max-seconds X]  the ensemble's",
        "                ceiling: sequential creates as async multis of K ops, W in flight, on the bare ZooKeeper",
        "                handle (no recipe); RESULT has items and seconds",
        "common: [--session-timeout-ms 10000] [--connect-timeout-ms 10000] [--log-level WARN]");

    private CuratorPeer() {
    }

    public static void main(String[] args) {
        out = new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.US_ASCII);
        System.setOut(System.err);
        Options opts;
        try {
            opts = Options.parse(args);
        } catch (UsageError e) {
            System.err.println("CuratorPeer: " + e.getMessage());
            System.err.println(USAGE);
            System.exit(2);
            return;
        }
        configureLogging(opts.get("log-level", "WARN"));
        int code;
        try {
            code = run(opts);
        } catch (UsageError e) {
            System.err.println("CuratorPeer: " + e.getMessage());
            System.err.println(USAGE);
            code = 2;
        } catch (Throwable t) {
            System.err.println("CuratorPeer: " + opts.command + " failed: " + t);
            t.printStackTrace(System.err);
            code = 1;
        }
        out.flush();
        System.err.flush();
        Thread watcher = stdinWatcher;
        if (watcher != null) {
            watcher.interrupt();
        }
        // Curator and ZooKeeper leave non-daemon threads behind in some failure paths; never hang on them.
        Runtime.getRuntime().halt(code);
    }

    private static int run(Options opts) throws Exception {
        switch (opts.command) {
            case "put":
                opts.allow("kind", "priority", "delay-until", "id", "background", "max-items", "put-timeout-ms");
                return withClient(opts, client -> cmdPut(client, opts));
            case "put-multi":
                opts.allow("kind", "priority", "delay-until", "background");
                return withClient(opts, client -> cmdPutMulti(client, opts));
            case "consume":
                opts.allow("kind", "lock-path", "count", "timeout-ms", "error-mode", "fail-on", "fail-times",
                    "min-items-before-refresh", "stop-on-eof", "quiet");
                return withClient(opts, client -> cmdConsume(client, opts));
            case "simple-offer":
                opts.allow();
                return withClient(opts, client -> cmdSimpleOffer(client, opts));
            case "simple-take":
                opts.allow("count", "timeout-ms", "stop-on-eof", "quiet");
                return withClient(opts, client -> cmdSimpleTake(client, opts));
            case "id-remove":
                opts.allow("id", "lock-path");
                return withClient(opts, client -> cmdIdRemove(client, opts));
            case "warmup":
                opts.allow();
                return cmdWarmup();
            case "bench-put":
            case "bench-put-multi":
                opts.allow("count", "size", "threads", "background", "multi", "max-seconds");
                return withClient(opts, client -> Bench.put(client, opts));
            case "bench-consume":
                opts.allow("lock-path", "count", "max-seconds");
                return withClient(opts, client -> Bench.consume(client, opts));
            case "bench-latency":
                opts.allow("rate", "duration-s", "size", "drain-s", "lock-path");
                return withClient(opts, client -> Bench.latency(client, opts));
            case "bench-raw-create":
                opts.allow("count", "size", "batch", "inflight", "max-seconds");
                return withClient(opts, client -> Bench.rawCreate(client, opts));
            default:
                throw new UsageError("unknown command: " + opts.command);
        }
    }

    // ----------------------------------------------------------------------------------------------------------
    // Commands

    private static int cmdPut(CuratorFramework client, Options opts) throws Exception {
        String kind = opts.kind();
        boolean background = opts.flag("background");
        int maxItems = opts.getInt("max-items", -1);
        int putTimeoutMs = opts.getInt("put-timeout-ms", 10_000);
        List<Line> lines = readLines();
        QueueBuilder<byte[]> builder = QueueBuilder.builder(client, null, new IdentitySerializer(), opts.path())
            .putInBackground(background);
        if (maxItems > 0) {
            if (background) {
                throw new UsageError("--max-items needs foreground puts (no --background)");
            }
            builder.maxItems(maxItems); // Curator also forces putInBackground(false) here
        }
        boolean bounded = maxItems > 0;
        int done = 0;
        try (Started started = Started.of(kind, builder, 0)) {
            for (int i = 0; i < lines.size(); i++) {
                Line line = lines.get(i);
                boolean ok;
                switch (kind) {
                    case "plain": {
                        DistributedQueue<byte[]> q = started.plain();
                        line.requireNoValue(kind);
                        if (bounded) {
                            ok = q.put(line.bytes, putTimeoutMs, TimeUnit.MILLISECONDS);
                        } else {
                            q.put(line.bytes);
                            ok = true;
                        }
                        break;
                    }
                    case "priority": {
                        DistributedPriorityQueue<byte[]> q = started.priority();
                        int priority = line.value != null ? parseInt(line.value, "priority")
                            : opts.getInt("priority", 0);
                        if (bounded) {
                            ok = q.put(line.bytes, priority, putTimeoutMs, TimeUnit.MILLISECONDS);
                        } else {
                            q.put(line.bytes, priority);
                            ok = true;
                        }
                        break;
                    }
                    case "delay": {
                        DistributedDelayQueue<byte[]> q = started.delay();
                        long epoch = line.value != null ? parseLong(line.value, "delay epoch")
                            : opts.requireLong("delay-until");
                        if (bounded) {
                            ok = q.put(line.bytes, epoch, putTimeoutMs, TimeUnit.MILLISECONDS);
                        } else {
                            q.put(line.bytes, epoch);
                            ok = true;
                        }
                        break;
                    }
                    case "id": {
                        DistributedIdQueue<byte[]> q = started.id();
                        String id = line.value != null ? line.value : opts.require("id");
                        if (bounded) {
                            ok = q.put(line.bytes, id, putTimeoutMs, TimeUnit.MILLISECONDS);
                        } else {
                            q.put(line.bytes, id);
                            ok = true;
                        }
                        break;
                    }
                    default:
                        throw new UsageError("unknown --kind " + kind);
                }
                if (ok) {
                    done++;
                } else {
                    emit("REJECTED " + i);
                }
            }
            started.flush(background);
        }
        emit("PUT " + done);
        return 0;
    }

    private static int cmdPutMulti(CuratorFramework client, Options opts) throws Exception {
        String kind = opts.kind();
        boolean background = opts.flag("background");
        List<Line> lines = readLines();
        List<byte[]> payloads = new ArrayList<>();
        for (Line line : lines) {
            line.requireNoValue("put-multi");
            payloads.add(line.bytes);
        }
        MultiItem<byte[]> multi = new ListMultiItem(payloads);
        QueueBuilder<byte[]> builder = QueueBuilder.builder(client, null, new IdentitySerializer(), opts.path())
            .putInBackground(background);
        try (Started started = Started.of(kind, builder, 0)) {
            switch (kind) {
                case "plain":
                    started.plain().putMulti(multi);
                    break;
                case "priority":
                    started.priority().putMulti(multi, opts.getInt("priority", 0));
                    break;
                case "delay":
                    started.delay().putMulti(multi, opts.requireLong("delay-until"));
                    break;
                default:
                    throw new UsageError("put-multi does not support --kind " + kind + " (Curator has no such call)");
            }
            started.flush(background);
        }
        emit("PUT " + payloads.size());
        return 0;
    }

    private static int cmdConsume(CuratorFramework client, Options opts) throws Exception {
        String kind = opts.kind();
        int count = opts.getInt("count", Integer.MAX_VALUE);
        long timeoutMs = opts.getLong("timeout-ms", 30_000L);
        String lockPath = opts.get("lock-path", null);
        String errorMode = opts.get("error-mode", null);
        byte[] failOn = opts.has("fail-on") ? parseHex(opts.get("fail-on", "")) : null;
        int failTimes = opts.getInt("fail-times", 1);
        boolean quiet = opts.flag("quiet");

        GatedExecutor gate = new GatedExecutor();
        CountingConsumer consumer = new CountingConsumer(count, gate, failOn, failTimes, quiet);
        QueueBuilder<byte[]> builder = QueueBuilder.builder(client, consumer, new IdentitySerializer(), opts.path())
            .executor(gate);
        if (lockPath != null) {
            builder.lockPath(lockPath);
        }
        CountDownLatch eof = opts.flag("stop-on-eof") ? watchStdinEof() : null;
        try (Started started = Started.of(kind, builder, opts.getInt("min-items-before-refresh", 0))) {
            if (errorMode != null) {
                started.queue.setErrorMode(parseErrorMode(errorMode));
            }
            emit("READY");
            consumer.awaitDone(timeoutMs, eof);
            // Let the item in progress finish (its delete and lock release), drop the rest untouched, then close.
            gate.closeAndDrain(10_000L);
        }
        emit("DONE " + consumer.consumed());
        return 0;
    }

    private static int cmdSimpleOffer(CuratorFramework client, Options opts) throws Exception {
        List<Line> lines = readLines();
        SimpleDistributedQueue queue = new SimpleDistributedQueue(client, opts.path());
        int done = 0;
        for (Line line : lines) {
            line.requireNoValue("simple-offer");
            if (!queue.offer(line.bytes)) {
                throw new IllegalStateException("offer returned false");
            }
            done++;
        }
        emit("PUT " + done);
        return 0;
    }

    private static int cmdSimpleTake(CuratorFramework client, Options opts) throws Exception {
        int count = opts.getInt("count", Integer.MAX_VALUE);
        long timeoutMs = opts.getLong("timeout-ms", 30_000L);
        boolean quiet = opts.flag("quiet");
        CountDownLatch eof = opts.flag("stop-on-eof") ? watchStdinEof() : null;
        SimpleDistributedQueue queue = new SimpleDistributedQueue(client, opts.path());
        emit("READY");
        long deadline = System.currentTimeMillis() + timeoutMs;
        int taken = 0;
        while (taken < count && (eof == null || eof.getCount() > 0)) {
            long remaining = deadline - System.currentTimeMillis();
            if (remaining <= 0) {
                break;
            }
            // Short polls so an EOF on stdin is noticed; poll() itself never loses an item it did not return.
            byte[] item = queue.poll(Math.min(remaining, 200L), TimeUnit.MILLISECONDS);
            if (item != null) {
                taken++;
                if (!quiet) {
                    emit("ITEM " + HEX.formatHex(item));
                }
            }
        }
        emit("DONE " + taken);
        return 0;
    }

    private static int cmdIdRemove(CuratorFramework client, Options opts) throws Exception {
        String id = opts.require("id");
        QueueBuilder<byte[]> builder = QueueBuilder.builder(client, null, new IdentitySerializer(), opts.path());
        String lockPath = opts.get("lock-path", null);
        if (lockPath != null) {
            builder.lockPath(lockPath);
        }
        int removed;
        try (Started started = Started.of("id", builder, 0)) {
            removed = started.id().remove(id);
        }
        emit("REMOVED " + removed);
        return 0;
    }

    /**
     * Touch the code paths of a real run without a server, so that a run with -XX:ArchiveClassesAtExit dumps
     * a class-data-sharing archive that makes later start-ups faster. Prints WARM.
     */
    private static int cmdWarmup() throws Exception {
        CuratorFramework client = CuratorFrameworkFactory.builder()
            .connectString("127.0.0.1:9")
            .sessionTimeoutMs(10_000)
            .connectionTimeoutMs(200)
            .retryPolicy(new ExponentialBackoffRetry(100, 1))
            .build();
        client.start();
        try {
            client.blockUntilConnected(300, TimeUnit.MILLISECONDS);
            GatedExecutor gate = new GatedExecutor();
            CountingConsumer consumer = new CountingConsumer(1, gate, null, 0, true);
            for (String kind : new String[] {"plain", "priority", "delay", "id"}) {
                QueueBuilder<byte[]> b = QueueBuilder.builder(client, consumer, new IdentitySerializer(), "/warmup")
                    .executor(gate).lockPath("/warmup-locks").putInBackground(false);
                QueueBase<byte[]> q = "plain".equals(kind) ? b.buildQueue()
                    : "priority".equals(kind) ? b.buildPriorityQueue(0)
                    : "delay".equals(kind) ? b.buildDelayQueue() : b.buildIdQueue();
                q.close();
            }
            new SimpleDistributedQueue(client, "/warmup");
            new ListMultiItem(List.of(parseHex("00ff"))).nextItem();
            parseErrorMode("delete");
            gate.closeAndDrain(1);
        } finally {
            client.close();
        }
        emit("WARM");
        return 0;
    }

    // ----------------------------------------------------------------------------------------------------------
    // Benchmarks: each command measures itself inside the JVM (JVM start-up and connecting are not timed) and
    // prints one "RESULT {json}" line. Wall-clock stamps are epoch seconds (so Python can merge several peers).

    private static final class Bench {
        private Bench() {
        }

        static double now() {
            java.time.Instant t = java.time.Instant.now();
            return t.getEpochSecond() + t.getNano() / 1e9;
        }

        /** A bytes queue (not started) feeding {@code consumer}, lock-safe when {@code lockPath} is set. */
        static DistributedQueue<byte[]> consumingQueue(CuratorFramework client, QueueConsumer<byte[]> consumer,
                                                       String path, String lockPath) {
            QueueBuilder<byte[]> builder = QueueBuilder.builder(client, consumer, new IdentitySerializer(), path);
            if (lockPath != null) {
                builder.lockPath(lockPath);
            }
            return builder.buildQueue();
        }

        static byte[] payload(int size) {
            byte[] b = new byte[size];
            Arrays.fill(b, (byte) 'x');
            return b;
        }

        /** Peak resident memory of this JVM in KiB (VmHWM), or -1 when /proc is unavailable. */
        static long peakRssKb() {
            try {
                for (String line : java.nio.file.Files.readAllLines(java.nio.file.Path.of("/proc/self/status"))) {
                    if (line.startsWith("VmHWM:")) {
                        return Long.parseLong(line.replaceAll("[^0-9]", ""));
                    }
                }
            } catch (IOException | RuntimeException e) {
                // not Linux: no figure
            }
            return -1;
        }

        static int put(CuratorFramework client, Options opts) throws Exception {
            int count = opts.getInt("count", 1000);
            int size = opts.getInt("size", 100);
            int threads = Math.max(1, opts.getInt("threads", 1));
            int multi = opts.getInt("multi", "bench-put-multi".equals(opts.command) ? 100 : 0);
            boolean background = opts.flag("background");
            long maxNanos = (long) (Double.parseDouble(opts.get("max-seconds", "600")) * 1e9);
            byte[] payload = payload(size);
            DistributedQueue<byte[]> q = QueueBuilder.builder(client, null, new IdentitySerializer(), opts.path())
                .putInBackground(background).buildQueue();
            q.start();
            java.util.concurrent.atomic.AtomicInteger next = new java.util.concurrent.atomic.AtomicInteger();
            java.util.concurrent.atomic.AtomicInteger done = new java.util.concurrent.atomic.AtomicInteger();
            java.util.concurrent.atomic.AtomicReference<Throwable> error = new java.util.concurrent.atomic.AtomicReference<>();
            int step = multi > 0 ? multi : 1;
            long t0 = System.nanoTime();
            long deadline = t0 + maxNanos;
            List<Thread> workers = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                Thread w = new Thread(() -> {
                    try {
                        while (System.nanoTime() < deadline) {
                            int start = next.getAndAdd(step);
                            if (start >= count) {
                                return;
                            }
                            int n = Math.min(step, count - start);
                            if (multi > 0) {
                                List<byte[]> items = new ArrayList<>(n);
                                for (int i = 0; i < n; i++) {
                                    items.add(payload);
                                }
                                q.putMulti(new ListMultiItem(items));
                            } else {
                                q.put(payload);
                            }
                            done.addAndGet(n);
                        }
                    } catch (Throwable e) {
                        error.compareAndSet(null, e);
                    }
                }, "bench-put-" + t);
                workers.add(w);
                w.start();
            }
            for (Thread w : workers) {
                w.join();
            }
            boolean flushed = !background || q.flushPuts(Math.max(1, (deadline - System.nanoTime()) / 1_000_000 + 30_000),
                TimeUnit.MILLISECONDS);
            double seconds = (System.nanoTime() - t0) / 1e9;
            q.close();
            if (error.get() != null) {
                throw new IllegalStateException("a put failed", error.get());
            }
            emit(String.format(java.util.Locale.ROOT,
                "RESULT {\"items\": %d, \"seconds\": %.6f, \"complete\": %s, \"flushed\": %s, \"threads\": %d}",
                done.get(), seconds, done.get() >= count && flushed, flushed, threads));
            return 0;
        }

        /** Sequential creates as pipelined async multis on the bare ZooKeeper handle: what the ensemble accepts. */
        static int rawCreate(CuratorFramework client, Options opts) throws Exception {
            int count = opts.getInt("count", 100_000);
            int size = opts.getInt("size", 100);
            int batch = Math.max(1, opts.getInt("batch", 500));
            int inflight = Math.max(1, opts.getInt("inflight", 4));
            long maxNanos = (long) (Double.parseDouble(opts.get("max-seconds", "600")) * 1e9);
            byte[] payload = payload(size);
            String prefix = opts.path() + "/queue-";
            client.createContainers(opts.path());
            org.apache.zookeeper.ZooKeeper zk = client.getZookeeperClient().getZooKeeper();
            java.util.concurrent.Semaphore slots = new java.util.concurrent.Semaphore(inflight);
            java.util.concurrent.atomic.AtomicLong done = new java.util.concurrent.atomic.AtomicLong();
            java.util.concurrent.atomic.AtomicReference<String> error = new java.util.concurrent.atomic.AtomicReference<>();
            List<org.apache.zookeeper.data.ACL> acl = org.apache.zookeeper.ZooDefs.Ids.OPEN_ACL_UNSAFE;
            long t0 = System.nanoTime();
            long deadline = t0 + maxNanos;
            int sent = 0;
            while (sent < count && System.nanoTime() < deadline && error.get() == null) {
                int n = Math.min(batch, count - sent);
                List<org.apache.zookeeper.Op> ops = new ArrayList<>(n);
                for (int i = 0; i < n; i++) {
                    ops.add(org.apache.zookeeper.Op.create(prefix, payload, acl,
                        org.apache.zookeeper.CreateMode.PERSISTENT_SEQUENTIAL));
                }
                slots.acquire();
                zk.multi(ops, (rc, path, ctx, results) -> {
                    if (rc == 0) {
                        done.addAndGet(n);
                    } else {
                        error.compareAndSet(null, "multi failed with rc " + rc);
                    }
                    slots.release();
                }, null);
                sent += n;
            }
            slots.acquire(inflight);
            double seconds = (System.nanoTime() - t0) / 1e9;
            if (error.get() != null) {
                throw new IllegalStateException(error.get());
            }
            emit(String.format(java.util.Locale.ROOT,
                "RESULT {\"items\": %d, \"seconds\": %.6f, \"complete\": %s, \"batch\": %d, \"inflight\": %d}",
                done.get(), seconds, done.get() >= count, batch, inflight));
            return 0;
        }

        static int consume(CuratorFramework client, Options opts) throws Exception {
            int count = opts.getInt("count", Integer.MAX_VALUE);
            double maxSeconds = Double.parseDouble(opts.get("max-seconds", "600"));
            String lockPath = opts.get("lock-path", null);
            Object lock = new Object();
            long[] consumed = {0};
            double[] stamps = {0.0, 0.0}; // first, last
            QueueConsumer<byte[]> consumer = new QueueConsumer<>() {
                @Override
                public void consumeMessage(byte[] message) {
                    double t = now();
                    synchronized (lock) {
                        if (consumed[0] == 0) {
                            stamps[0] = t;
                        }
                        consumed[0]++;
                        stamps[1] = t;
                        if (consumed[0] >= count) {
                            lock.notifyAll();
                        }
                    }
                }

                @Override
                public void stateChanged(CuratorFramework c, ConnectionState s) {
                }
            };
            DistributedQueue<byte[]> q = consumingQueue(client, consumer, opts.path(), lockPath);
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            emit("READY");
            String go = in.readLine();
            if (go == null || !go.trim().equals("GO")) {
                throw new IllegalStateException("expected GO on stdin, got " + go);
            }
            CountDownLatch eof = new CountDownLatch(1);
            Thread reader = new Thread(() -> {
                try {
                    while (in.readLine() != null) {
                        // input after GO is ignored; only its end matters
                    }
                } catch (IOException ignored) {
                    // a broken stdin counts as the end
                }
                eof.countDown();
            }, "stdin-eof");
            reader.setDaemon(true);
            reader.start();
            double tGo = now();
            long deadline = System.currentTimeMillis() + (long) (maxSeconds * 1000);
            q.start();
            synchronized (lock) {
                while (consumed[0] < count && eof.getCount() > 0) {
                    long remaining = deadline - System.currentTimeMillis();
                    if (remaining <= 0) {
                        break;
                    }
                    lock.wait(Math.min(remaining, 50L));
                }
            }
            long n;
            double first;
            double last;
            synchronized (lock) {
                n = consumed[0];
                first = stamps[0];
                last = stamps[1];
            }
            emit(String.format(java.util.Locale.ROOT,
                "RESULT {\"consumed\": %d, \"t_go\": %.6f, \"t_first\": %.6f, \"t_last\": %.6f, \"rss_kb\": %d}",
                n, tGo, first, last, peakRssKb()));
            out.flush();
            // Closing a Curator queue mid-run can block on its executor; the result is out, so close the session
            // (its lock nodes go at once) and exit right away.
            closeQuietly(client);
            Runtime.getRuntime().halt(0);
            return 0;
        }

        static int latency(CuratorFramework client, Options opts) throws Exception {
            double rate = Double.parseDouble(opts.require("rate"));
            double duration = Double.parseDouble(opts.require("duration-s"));
            double drain = Double.parseDouble(opts.get("drain-s", "30"));
            int size = Math.max(8, opts.getInt("size", 100));
            String lockPath = opts.get("lock-path", null);
            int total = Math.max(1, (int) Math.round(rate * duration));
            long[] sentAt = new long[total];
            long[] latency = new long[total];
            Arrays.fill(latency, -1L);
            java.util.concurrent.atomic.AtomicInteger received = new java.util.concurrent.atomic.AtomicInteger();
            CountDownLatch all = new CountDownLatch(total);
            QueueConsumer<byte[]> consumer = new QueueConsumer<>() {
                @Override
                public void consumeMessage(byte[] message) {
                    long t = System.nanoTime();
                    int idx = ByteBuffer.wrap(message).getInt();
                    if (idx >= 0 && idx < total && latency[idx] < 0) {
                        latency[idx] = t - sentAt[idx];
                        received.incrementAndGet();
                        all.countDown();
                    }
                }

                @Override
                public void stateChanged(CuratorFramework c, ConnectionState s) {
                }
            };
            DistributedQueue<byte[]> q = consumingQueue(client, consumer, opts.path(), lockPath);
            q.start();
            long t0 = System.nanoTime();
            long interval = (long) (1e9 / rate);
            for (int i = 0; i < total; i++) {
                long due = t0 + i * interval;
                long wait;
                while ((wait = due - System.nanoTime()) > 0) {
                    java.util.concurrent.locks.LockSupport.parkNanos(wait);
                }
                byte[] p = new byte[size];
                ByteBuffer.wrap(p).putInt(i);
                sentAt[i] = System.nanoTime();
                q.put(p);
            }
            double offeredSeconds = (System.nanoTime() - t0) / 1e9;
            all.await((long) (drain * 1000), TimeUnit.MILLISECONDS);
            long[] got = Arrays.stream(latency).filter(v -> v >= 0).sorted().toArray();
            int r = got.length;
            emit(String.format(java.util.Locale.ROOT,
                "RESULT {\"sent\": %d, \"received\": %d, \"offered_seconds\": %.6f, \"p50_ms\": %s, \"p99_ms\": %s, "
                    + "\"max_ms\": %s}",
                total, r, offeredSeconds, pct(got, 0.50), pct(got, 0.99), r == 0 ? "null" : fmtMs(got[r - 1])));
            out.flush();
            closeQuietly(client);
            Runtime.getRuntime().halt(0);
            return 0;
        }

        private static void closeQuietly(CuratorFramework client) {
            try {
                client.close();
            } catch (RuntimeException e) {
                // exiting anyway
            }
        }

        private static String pct(long[] sorted, double q) {
            if (sorted.length == 0) {
                return "null";
            }
            int i = Math.min(sorted.length - 1, (int) Math.ceil(q * sorted.length) - 1);
            return fmtMs(sorted[Math.max(0, i)]);
        }

        private static String fmtMs(long nanos) {
            return String.format(java.util.Locale.ROOT, "%.3f", nanos / 1e6);
        }
    }

    // ----------------------------------------------------------------------------------------------------------
    // Client and queue plumbing

    private interface ClientAction {
        int run(CuratorFramework client) throws Exception;
    }

    private static int withClient(Options opts, ClientAction action) throws Exception {
        String connect = opts.require("connect");
        opts.require("path");
        int sessionMs = opts.getInt("session-timeout-ms", 10_000);
        int connectMs = opts.getInt("connect-timeout-ms", 10_000);
        CuratorFramework client = CuratorFrameworkFactory.builder()
            .connectString(connect)
            .sessionTimeoutMs(sessionMs)
            .connectionTimeoutMs(connectMs)
            .retryPolicy(new ExponentialBackoffRetry(100, 5))
            .build();
        client.start();
        try {
            if (!client.blockUntilConnected(connectMs, TimeUnit.MILLISECONDS)) {
                throw new IllegalStateException("could not connect to " + connect + " within " + connectMs + " ms");
            }
            return action.run(client);
        } finally {
            client.close();
        }
    }

    /** A started queue of one kind; closing it closes the queue (which flushes pending background puts). */
    private static final class Started implements AutoCloseable {
        final QueueBase<byte[]> queue;

        private Started(QueueBase<byte[]> queue) {
            this.queue = queue;
        }

        static Started of(String kind, QueueBuilder<byte[]> builder, int minItemsBeforeRefresh) throws Exception {
            QueueBase<byte[]> queue;
            switch (kind) {
                case "plain":
                    queue = builder.buildQueue();
                    break;
                case "priority":
                    queue = builder.buildPriorityQueue(minItemsBeforeRefresh);
                    break;
                case "delay":
                    queue = builder.buildDelayQueue();
                    break;
                case "id":
                    queue = builder.buildIdQueue();
                    break;
                default:
                    throw new UsageError("unknown --kind " + kind + " (plain, priority, delay, id)");
            }
            queue.start();
            return new Started(queue);
        }

        DistributedQueue<byte[]> plain() {
            return (DistributedQueue<byte[]>) queue;
        }

        DistributedPriorityQueue<byte[]> priority() {
            return (DistributedPriorityQueue<byte[]>) queue;
        }

        DistributedDelayQueue<byte[]> delay() {
            return (DistributedDelayQueue<byte[]>) queue;
        }

        DistributedIdQueue<byte[]> id() {
            return (DistributedIdQueue<byte[]>) queue;
        }

        void flush(boolean background) throws InterruptedException {
            if (background && !queue.flushPuts(30, TimeUnit.SECONDS)) {
                throw new IllegalStateException("background puts did not all complete within 30 s (flushPuts=false)");
            }
        }

        @Override
        public void close() throws IOException {
            queue.close();
        }
    }

    /** Bytes in, bytes out: what crosses the wire is exactly the caller's payload. */
    private static final class IdentitySerializer implements QueueSerializer<byte[]> {
        @Override
        public byte[] serialize(byte[] item) {
            return item;
        }

        @Override
        public byte[] deserialize(byte[] bytes) {
            return bytes;
        }
    }

    private static final class ListMultiItem implements MultiItem<byte[]> {
        private final Iterator<byte[]> it;

        ListMultiItem(List<byte[]> items) {
            this.it = items.iterator();
        }

        @Override
        public byte[] nextItem() {
            return it.hasNext() ? it.next() : null;
        }
    }

    /**
     * Runs Curator's per-node tasks on the calling (queue loop) thread, like Curator's default direct executor,
     * but can be closed: once closed, new tasks are dropped without touching their node (no lock, no read, no
     * delete), so a consumer that stops after N items never takes an item it does not report.
     */
    private static final class GatedExecutor implements Executor {
        private final Object lock = new Object();
        private boolean open = true;
        private int inFlight;

        @Override
        public void execute(Runnable task) {
            synchronized (lock) {
                if (!open) {
                    return; // the queue loop then waits on its latch until close() interrupts it
                }
                inFlight++;
            }
            try {
                task.run();
            } finally {
                synchronized (lock) {
                    inFlight--;
                    lock.notifyAll();
                }
            }
        }

        void close() {
            synchronized (lock) {
                open = false;
            }
        }

        void closeAndDrain(long maxWaitMs) throws InterruptedException {
            long deadline = System.currentTimeMillis() + maxWaitMs;
            synchronized (lock) {
                open = false;
                while (inFlight > 0) {
                    long remaining = deadline - System.currentTimeMillis();
                    if (remaining <= 0) {
                        System.err.println("CuratorPeer: an item was still in progress at close");
                        return;
                    }
                    lock.wait(remaining);
                }
            }
        }
    }

    private static final class CountingConsumer implements QueueConsumer<byte[]> {
        private final int target;
        private final GatedExecutor gate;
        private final byte[] failOn;
        private final boolean quiet;
        private final Object lock = new Object();
        private int consumed;
        private int failuresLeft;

        CountingConsumer(int target, GatedExecutor gate, byte[] failOn, int failTimes, boolean quiet) {
            this.target = target;
            this.gate = gate;
            this.failOn = failOn;
            this.failuresLeft = failTimes;
            this.quiet = quiet;
        }

        @Override
        public void consumeMessage(byte[] message) throws Exception {
            String hex = HEX.formatHex(message);
            synchronized (lock) {
                if (failOn != null && Arrays.equals(failOn, message) && failuresLeft != 0) {
                    if (failuresLeft > 0) {
                        failuresLeft--;
                    }
                    emit("FAIL " + hex);
                    throw new Exception("CuratorPeer --fail-on " + hex);
                }
                consumed++;
                if (!quiet) {
                    emit("ITEM " + hex);
                }
                if (consumed >= target) {
                    gate.close(); // later znodes are left alone; the rest of this znode's items still arrive
                    lock.notifyAll();
                }
            }
        }

        @Override
        public void stateChanged(CuratorFramework client, ConnectionState newState) {
            // Curator never registers queue consumers as connection listeners (CURATOR-336).
        }

        int consumed() {
            synchronized (lock) {
                return consumed;
            }
        }

        void awaitDone(long timeoutMs, CountDownLatch eof) throws InterruptedException {
            long deadline = System.currentTimeMillis() + timeoutMs;
            synchronized (lock) {
                while (consumed < target && (eof == null || eof.getCount() > 0)) {
                    long remaining = deadline - System.currentTimeMillis();
                    if (remaining <= 0) {
                        return;
                    }
                    lock.wait(eof == null ? remaining : Math.min(remaining, 100L));
                }
            }
        }
    }

    // ----------------------------------------------------------------------------------------------------------
    // I/O helpers

    private static final class Line {
        final byte[] bytes;
        final String value;

        Line(byte[] bytes, String value) {
            this.bytes = bytes;
            this.value = value;
        }

        void requireNoValue(String what) throws UsageError {
            if (value != null) {
                throw new UsageError(what + " takes no per-item value (got HEX<TAB>" + value + ")");
            }
        }
    }

    private static List<Line> readLines() throws IOException, UsageError {
        List<Line> lines = new ArrayList<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String raw;
        while ((raw = in.readLine()) != null) {
            int tab = raw.indexOf('\t');
            String hex = tab < 0 ? raw : raw.substring(0, tab);
            String value = tab < 0 ? null : raw.substring(tab + 1);
            lines.add(new Line(parseHex(hex), value));
        }
        return lines;
    }

    /**
     * Counts down when stdin ends (the caller closed it, or died). Reads through an interruptible FileChannel:
     * a thread blocked in a plain stream read delays the JVM's exit by about 0.3 s, so main() interrupts it.
     */
    private static CountDownLatch watchStdinEof() {
        CountDownLatch eof = new CountDownLatch(1);
        Thread t = new Thread(() -> {
            try (FileChannel in = new FileInputStream(FileDescriptor.in).getChannel()) {
                ByteBuffer buf = ByteBuffer.allocate(256);
                while (in.read(buf) >= 0) {
                    buf.clear(); // input is ignored; only its end matters
                }
            } catch (IOException ignored) {
                // a broken or interrupted stdin counts as the end
            }
            eof.countDown();
        }, "stdin-eof");
        t.setDaemon(true);
        t.start();
        stdinWatcher = t;
        return eof;
    }

    private static void emit(String line) {
        synchronized (CuratorPeer.class) {
            out.print(line);
            out.print('\n');
            out.flush();
        }
    }

    private static byte[] parseHex(String hex) throws UsageError {
        try {
            return HEX.parseHex(hex.trim());
        } catch (IllegalArgumentException e) {
            throw new UsageError("bad hex item: '" + hex + "'");
        }
    }

    private static int parseInt(String s, String what) throws UsageError {
        try {
            return Integer.parseInt(s.trim());
        } catch (NumberFormatException e) {
            throw new UsageError("bad " + what + ": '" + s + "'");
        }
    }

    private static long parseLong(String s, String what) throws UsageError {
        try {
            return Long.parseLong(s.trim());
        } catch (NumberFormatException e) {
            throw new UsageError("bad " + what + ": '" + s + "'");
        }
    }

    private static ErrorMode parseErrorMode(String s) throws UsageError {
        switch (s.toLowerCase()) {
            case "requeue":
                return ErrorMode.REQUEUE;
            case "delete":
                return ErrorMode.DELETE;
            default:
                throw new UsageError("bad --error-mode '" + s + "' (requeue or delete)");
        }
    }

    private static void configureLogging(String level) {
        ConfigurationBuilder<BuiltConfiguration> b = ConfigurationBuilderFactory.newConfigurationBuilder();
        b.setStatusLevel(Level.ERROR);
        b.setConfigurationName("CuratorPeer");
        AppenderComponentBuilder stderr = b.newAppender("stderr", "Console").addAttribute("target", "SYSTEM_ERR");
        stderr.add(b.newLayout("PatternLayout").addAttribute("pattern", "%d{HH:mm:ss.SSS} %-5level %c{1} - %msg%n"));
        b.add(stderr);
        b.add(b.newRootLogger(Level.toLevel(level, Level.WARN)).add(b.newAppenderRef("stderr")));
        Configurator.initialize(b.build());
    }

    private static final class UsageError extends Exception {
        private static final long serialVersionUID = 1L;

        UsageError(String message) {
            super(message);
        }
    }

    /** "--key value" options and bare flags after the command word. */
    private static final class Options {
        private static final Set<String> FLAGS = Set.of("background", "stop-on-eof", "quiet");
        private static final Set<String> COMMON = Set.of(
            "connect", "path", "session-timeout-ms", "connect-timeout-ms", "log-level");

        final String command;
        private final Map<String, String> values = new HashMap<>();

        private Options(String command) {
            this.command = command;
        }

        static Options parse(String[] args) throws UsageError {
            if (args.length == 0) {
                throw new UsageError("no command");
            }
            Options o = new Options(args[0]);
            for (int i = 1; i < args.length; i++) {
                String a = args[i];
                if (!a.startsWith("--") || a.length() < 3) {
                    throw new UsageError("unexpected argument: " + a);
                }
                String key = a.substring(2);
                if (FLAGS.contains(key)) {
                    o.values.put(key, "true");
                } else {
                    if (i + 1 >= args.length) {
                        throw new UsageError("--" + key + " needs a value");
                    }
                    o.values.put(key, args[++i]);
                }
            }
            return o;
        }

        void allow(String... keys) throws UsageError {
            Set<String> ok = new HashSet<>(COMMON);
            ok.addAll(Arrays.asList(keys));
            for (String k : values.keySet()) {
                if (!ok.contains(k)) {
                    throw new UsageError("option --" + k + " is not valid for " + command);
                }
            }
        }

        boolean has(String key) {
            return values.containsKey(key);
        }

        boolean flag(String key) {
            return values.containsKey(key);
        }

        String get(String key, String dflt) {
            return values.getOrDefault(key, dflt);
        }

        String require(String key) throws UsageError {
            String v = values.get(key);
            if (v == null) {
                throw new UsageError(command + " needs --" + key);
            }
            return v;
        }

        String path() throws UsageError {
            return require("path");
        }

        String kind() {
            return get("kind", "plain");
        }

        int getInt(String key, int dflt) throws UsageError {
            String v = values.get(key);
            return v == null ? dflt : parseInt(v, "--" + key);
        }

        long getLong(String key, long dflt) throws UsageError {
            String v = values.get(key);
            return v == null ? dflt : parseLong(v, "--" + key);
        }

        long requireLong(String key) throws UsageError {
            return parseLong(require(key), "--" + key);
        }
    }
}
