# The seqkeeper worker image used by docker-compose.yml.
FROM python:3.11-slim
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY processors processors
COPY state state
COPY topologies topologies
COPY spark_sink spark_sink
COPY seqkeeper seqkeeper
COPY bench bench
RUN pip install --no-cache-dir .
ENV SEQKEEPER_DATA_DIR=/data
VOLUME /data
ENTRYPOINT ["seqkeeper"]
CMD ["worker"]
