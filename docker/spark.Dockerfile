# Spark (from the pyspark wheel) with zkqueue installed, for the compose file beside it.
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY setup.cfg pyproject.toml README.md ./
COPY zkqueue ./zkqueue
RUN python -m venv /opt/spark-venv && /opt/spark-venv/bin/pip install --no-cache-dir '.[spark]'
ENV PATH=/opt/spark-venv/bin:$PATH SPARK_HOME=/opt/spark-venv/lib/python3.11/site-packages/pyspark
