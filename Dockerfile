# syntax=docker/dockerfile:1
#
# One image for the Spark driver and the executors of the tfos jobs: the pinned stack in a venv at
# /opt/tfos/.venv (pyspark from pip: its bin/spark-submit and spark-class are the image's Spark),
# the TFRecord data source jar, conf/ and scripts/. Usage: docs/deploy.md.
#
#   docker build -t tfos-jobs:0.1.0 .
#   docker build -t tfos-jobs:0.1.0-gpu --build-arg GPU=true .     # TensorFlow's CUDA build
#
# NOT BUILT: this file was written on a machine without a Docker engine (the docker CLI is there,
# no daemon), so it has never been built or run. Its steps were checked outside Docker where cheap
# (the pyspark pin extraction, the jar build script, the wheel carrying the jar, the entrypoint's
# driver/executor commands against this pyspark). Needs BuildKit (the `syntax` line, COPY <<EOF).
#
# Base: python:3.11-slim-bookworm + Debian's openjdk-17-jre-headless, rather than
# eclipse-temurin:17-jre-jammy. The stack is pinned and verified on CPython 3.11 (tensorflow 2.21
# cp311 wheels); the official Python image is exactly that, and Debian 12 ships OpenJDK 17, the
# same JVM the jar is compiled and the tests run with on our build machines (Debian 12, OpenJDK 17).
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
COPY scripts/build_tfrecord_jar.sh scripts/
# Only pyspark, at the tested version (constraints.txt): the jar must match the image's Spark exactly.
RUN python -m venv /build/venv \
 && /build/venv/bin/pip install --no-cache-dir "$(grep -oE '^pyspark==[0-9][0-9.]*' constraints.txt)" \
 && scripts/build_tfrecord_jar.sh /build/venv/bin/python /build/out/tfos-tfrecord.jar

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
# pip install . needs pyproject.toml, README.md (the project's readme), the build backend, the
# package sources and the files it ships (conf/, scripts/); the jar goes into tfos_jobs/jars/
# first, so that the installed package carries it (package data) and the build backend uses it.
COPY pyproject.toml README.md constraints.txt ./
COPY build_support/ build_support/
COPY conf/ conf/
COPY scripts/ scripts/
COPY tfos_jobs/ tfos_jobs/
COPY udfs/ udfs/
COPY --from=jar /build/out/tfos-tfrecord.jar tfos_jobs/jars/tfos-tfrecord.jar
RUN python -m venv /opt/tfos/.venv \
 && pip install --no-cache-dir -c constraints.txt . \
 && if [ "$GPU" = "true" ]; then pip install --no-cache-dir -c constraints.txt "tensorflow[and-cuda]"; fi \
 && rm -rf build ./*.egg-info \
 && cd / && python -c "import pyspark, tensorflowonspark, tf_keras, tfos_jobs.cli, tfos_jobs.session as s; \
assert s.TFRECORD_JAR.is_file(), s.TFRECORD_JAR; print('pyspark', pyspark.__version__, 'jar', s.TFRECORD_JAR)"
COPY docs/ docs/

# Spark on Kubernetes starts its pods with container *args* only, never a command:
#   driver pods:   driver --properties-file /opt/spark/conf/spark.properties --class ... <app> <args>
#   executor pods: executor          (settings in SPARK_DRIVER_URL, SPARK_EXECUTOR_* ... env vars)
# so the image's ENTRYPOINT has to turn those into a spark-submit and an executor JVM, as
# /opt/entrypoint.sh in Apache Spark's images does; this is the same logic for the pip pyspark.
# Any other command runs as given (`docker run tfos-jobs tfos prepare ...`, YARN's launch script).
COPY --chmod=755 <<'EOF' /opt/entrypoint.sh
#!/bin/bash
set -euo pipefail

# Hadoop's login needs a passwd entry for the UID; add one for an arbitrary UID when possible.
if ! getent passwd "$(id -u)" >/dev/null 2>&1; then
  if [[ -w /etc/passwd ]]; then
    echo "$(id -u):x:$(id -u):$(id -g):${SPARK_USER_NAME:-anonymous uid}:/home/tfos:/bin/false" >>/etc/passwd
  else
    echo "entrypoint: UID $(id -u) has no passwd entry; set HADOOP_USER_NAME if Hadoop's login fails" >&2
  fi
fi

case "${1:-}" in
  driver)
    shift
    # The TensorFlowOnSpark reservation server advertises the pod IP, which the executors can reach.
    export TFOS_SERVER_HOST="${TFOS_SERVER_HOST:-${SPARK_DRIVER_BIND_ADDRESS:-}}"
    [[ -n "$TFOS_SERVER_HOST" ]] || unset TFOS_SERVER_HOST
    exec /usr/bin/tini -s -- "$SPARK_HOME/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS}" \
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=${SPARK_DRIVER_BIND_ADDRESS}" \
      --deploy-mode client "$@"
    ;;
  executor)
    shift
    # java directly, as Spark's own entrypoint does: spark-class would size the heap from
    # SPARK_DRIVER_MEMORY for this class. Java options come as SPARK_JAVA_OPT_0, _1, ...
    opts=()
    for ((i = 0; ; i++)); do
      var="SPARK_JAVA_OPT_$i"
      [[ -n "${!var+x}" ]] || break
      opts+=("${!var}")
    done
    classpath="${SPARK_CONF_DIR:+$SPARK_CONF_DIR:}${HADOOP_CONF_DIR:+$HADOOP_CONF_DIR:}${SPARK_CLASSPATH:+$SPARK_CLASSPATH:}$SPARK_HOME/jars/*:$PWD"
    exec /usr/bin/tini -s -- "$JAVA_HOME/bin/java" "${opts[@]}" \
      -Xms"$SPARK_EXECUTOR_MEMORY" -Xmx"$SPARK_EXECUTOR_MEMORY" \
      -cp "$classpath" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "$SPARK_DRIVER_URL" \
      --executor-id "$SPARK_EXECUTOR_ID" \
      --cores "$SPARK_EXECUTOR_CORES" \
      --app-id "$SPARK_APPLICATION_ID" \
      --hostname "$SPARK_EXECUTOR_POD_IP" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
      --podName "${SPARK_EXECUTOR_POD_NAME:-$(hostname)}"
    ;;
  *)
    exec /usr/bin/tini -s -- "$@"
    ;;
esac
EOF

# /opt/tfos is the working directory of drivers and executors (executors fetch files into it): it
# is writable by the user (and by group 0, for platforms that run an arbitrary UID in group 0);
# the sticky bit keeps the installed files from being replaced.
RUN chown 185:0 /opt/tfos && chmod 1775 /opt/tfos
USER 185
ENTRYPOINT ["/opt/entrypoint.sh"]
CMD ["tfos", "--help"]
