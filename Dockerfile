# One image for the Spark driver and the executors of the tfos jobs: the pinned stack in a venv at
# /opt/tfos/.venv (pyspark from pip: its bin/spark-submit and spark-class are the image's Spark),
# the TFRecord data source jar, conf/ and scripts/. Usage: docs/deploy.md.
#
#   make image                  # scripts/build-image: Docker, buildah or podman, whichever is here
#   docker build -t tfos-jobs:0.1.0 .
#   docker build -t tfos-jobs:0.1.0-gpu --build-arg GPU=true .     # TensorFlow's CUDA build
#   buildah bud --build-arg PYTHON_IMAGE=localhost/tfos-base:bookworm-py311 -t tfos-jobs:0.1.0 .
#
# Plain Dockerfile instructions only (no heredocs, no `# syntax` frontend to pull), so BuildKit,
# the classic builder, podman and buildah build it alike. Any Debian 12 base with python3.11,
# `python` on PATH and the venv module can stand in for the default (--build-arg PYTHON_IMAGE=...).
#
# Base: python:3.11-slim-bookworm + Debian's openjdk-17-jre-headless, rather than
# eclipse-temurin:17-jre-jammy. The stack is pinned and verified on CPython 3.11 (tensorflow 2.21
# cp311 wheels); the official Python image is exactly that, and Debian 12 ships OpenJDK 17, the
# JVM the jar is compiled and tested with.
# Temurin's jammy image has Ubuntu 22.04's Python 3.10, so it would need a second Python.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- stage 1: the TFRecord data source jar ------------------------------------------------------
# scripts/build_tfrecord_jar.sh compiles jvm/tfrecord with the Scala compiler that pyspark ships,
# against pyspark's own jars; it needs a JDK (javac's `jar`), which the final image does not.
FROM ${PYTHON_IMAGE} AS jar
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jdk-headless \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /build
COPY constraints.txt ./
COPY jvm/ jvm/
COPY scripts/build_tfrecord_jar.sh scripts/fetch-maven-jars scripts/tfjava-jars.txt scripts/
# TensorFlow Java (the prediction function scoring in the executor JVM), beside the jar it is compiled with.
RUN python scripts/fetch-maven-jars scripts/tfjava-jars.txt /build/out/tfjava
# Only pyspark, at the tested version (constraints.txt): the jar must match the image's Spark exactly.
RUN python -m venv /build/venv \
 && /build/venv/bin/pip install --no-cache-dir "$(grep -oE '^pyspark==[0-9][0-9.]*' constraints.txt)" \
 && scripts/build_tfrecord_jar.sh /build/venv/bin/python /build/out/tfos-tfrecord.jar
# The S3A connector (s3a:// paths) for that Spark's Hadoop client, from Maven Central, unless S3A=false:
# on Kubernetes a job's jars cannot come from the submitting machine's disk, and a driver pod
# cannot fetch the connector from S3 before it has the connector.
ARG S3A=true
COPY scripts/s3a-jars.txt scripts/
RUN mkdir -p /build/s3a && if [ "$S3A" = "true" ]; then python scripts/fetch-maven-jars scripts/s3a-jars.txt /build/s3a; fi

# ---- stage 2: the image ---------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
# GPU=true adds TensorFlow's CUDA libraries (pip wheels); the host still needs the NVIDIA driver
# and container toolkit (on Kubernetes: the NVIDIA device plugin), which provide nvidia-smi.
ARG GPU=false

# tini: PID 1 that forwards signals and reaps orphans (TF nodes start helper processes);
# procps: ps, for looking into a running container.
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini procps \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /usr/lib/jvm/java-17

# The non-root user: UID 185 like Apache Spark's own images, so pod security settings written for
# those (runAsUser: 185, fsGroup) fit this image too.
RUN groupadd --system --gid 185 tfos \
 && useradd --system --uid 185 --gid 185 --home-dir /home/tfos --create-home --shell /bin/bash tfos

ENV JAVA_HOME=/usr/lib/jvm/java-17 \
    VIRTUAL_ENV=/opt/tfos/.venv \
    PATH=/opt/tfos/.venv/bin:$PATH \
    SPARK_HOME=/opt/tfos/.venv/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/opt/tfos/.venv/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/tfos/.venv/bin/python \
    TF_USE_LEGACY_KERAS=1 \
    TF_CPP_MIN_LOG_LEVEL=2 \
    PYARROW_IGNORE_TIMEZONE=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/tfos
# The pinned dependencies first, in a layer of their own: it changes only with pyproject.toml and
# constraints.txt, so a change to the package's code rebuilds in seconds, not minutes.
COPY pyproject.toml constraints.txt ./
RUN python -m venv /opt/tfos/.venv \
 && python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
    > /tmp/requirements.txt \
 && pip install --no-cache-dir -c constraints.txt -r /tmp/requirements.txt \
 && if [ "$GPU" = "true" ]; then pip install --no-cache-dir -c constraints.txt "tensorflow[and-cuda]"; fi \
 && rm /tmp/requirements.txt
COPY --from=jar /build/s3a/ /tmp/s3a-jars/
RUN if ls /tmp/s3a-jars/*.jar >/dev/null 2>&1; then cp /tmp/s3a-jars/*.jar "$SPARK_HOME/jars/"; fi && rm -rf /tmp/s3a-jars
# pip install . needs pyproject.toml, README.md (the project's readme), the build backend, the
# package sources and the files it ships (conf/, scripts/); the jar goes into tfos_jobs/jars/
# first, so that the installed package carries it (package data) and the build backend uses it.
COPY README.md ./
COPY build_support/ build_support/
COPY conf/ conf/
COPY scripts/ scripts/
COPY tfos_jobs/ tfos_jobs/
COPY udfs/ udfs/
COPY --from=jar /build/out/tfos-tfrecord.jar tfos_jobs/jars/tfos-tfrecord.jar
COPY --from=jar /build/out/tfjava/ tfos_jobs/jars/tfjava/
RUN pip install --no-cache-dir --no-deps . \
 && rm -rf build ./*.egg-info \
 && cd / && python -c "import pyspark, tensorflowonspark, tf_keras, tfos_jobs.cli, tfos_jobs.session_builder as s; \
assert s.TFRECORD_JAR.is_file(), s.TFRECORD_JAR; print('pyspark', pyspark.__version__, 'jar', s.TFRECORD_JAR)"
COPY docs/ docs/

# Spark on Kubernetes starts its pods with arguments only (`driver ...`, `executor`): the entrypoint
# turns them into a spark-submit and an executor JVM (scripts/image-entrypoint, installed above with
# scripts/); any other command runs as given.

# /opt/tfos is the working directory of drivers and executors (executors fetch files into it): it
# is writable by the user (and by group 0, for platforms that run an arbitrary UID in group 0);
# the sticky bit keeps the installed files from being replaced.
# A local-cluster master (`tfos demo` in a container) keeps its workers' files in $SPARK_HOME/work.
RUN chown 185:0 /opt/tfos && chmod 1775 /opt/tfos && mkdir -m 1777 "$SPARK_HOME/work"
USER 185
ENTRYPOINT ["/opt/tfos/scripts/image-entrypoint"]
CMD ["tfos", "--help"]
