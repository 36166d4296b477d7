# The seqkeeper image used by docker-compose.yml: the workers and the Spark side
# (`seqkeeper compact`) run from it.
#
# Pinned to Debian bookworm: `python:3.11-slim` now follows trixie, which has no
# openjdk-17-jre-headless. PySpark 4 needs Java 17 or newer.
FROM python:3.11-slim-bookworm
# (slim images drop /usr/share/man; the JRE's postinst links a man page there)
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update -qq && apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /opt/java
ENV JAVA_HOME=/opt/java \
    PYSPARK_PYTHON=/usr/local/bin/python \
    PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY processors processors
COPY state state
COPY topologies topologies
COPY spark_sink spark_sink
COPY seqkeeper seqkeeper
COPY bench bench
COPY schemas schemas
RUN pip install --no-cache-dir .
ENV SEQKEEPER_DATA_DIR=/data
VOLUME /data
ENTRYPOINT ["seqkeeper"]
CMD ["worker"]
