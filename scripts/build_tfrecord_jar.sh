#!/usr/bin/env bash
# Builds the package's jar (the TFRecord Spark data source, the prediction function's argument
# check and its JVM scoring, the SQL server's password check) with
# the Scala compiler shipped inside pyspark, so the jar matches that pyspark's Scala and Spark
# versions exactly. Sources: every jvm/*/src/main/scala tree.
#   usage: scripts/build_tfrecord_jar.sh <python-of-venv> <out.jar>
set -euo pipefail

die() { echo "build_tfrecord_jar: error: $*" >&2; exit 1; }

[[ $# -eq 2 ]] || die "usage: $0 <python-of-venv-with-pyspark> <out.jar>"
python="$1"
out="$2"
start=$(date +%s)

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$repo/jvm"
[[ -x "$python" ]] || die "python '$python' not found or not executable"
command -v java >/dev/null || die "java not found on PATH (need a JDK 17)"
command -v jar >/dev/null || die "jar not found on PATH (need a JDK, not just a JRE)"

jars="$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')" \
  || die "cannot import pyspark with $python"
[[ -d "$jars" ]] || die "pyspark jars dir '$jars' does not exist"

compiler_cp=""
for name in scala-compiler scala-library scala-reflect; do
  found=( "$jars"/"$name"-2.*.jar )
  [[ -f "${found[0]}" ]] || die "no $name jar in $jars"
  compiler_cp="$compiler_cp:${found[0]}"
done
classpath="$(printf '%s:' "$jars"/*.jar)"
# TensorFlow Java (scripts/tfjava-jars.txt, fetched beside the jar) for the prediction function that scores in the JVM.
tfjava="$(dirname "$out")/tfjava"
compgen -G "$tfjava/tensorflow-core-api-*.jar" >/dev/null || die "no TensorFlow Java jars in $tfjava (make setup fetches them)"
classpath="$classpath$(printf '%s:' "$tfjava"/*.jar)"

mapfile -t sources < <(find "$src" -path '*/src/main/scala/*' -name '*.scala' | sort)
[[ ${#sources[@]} -gt 0 ]] || die "no Scala sources under $src"

mkdir -p "$(dirname "$out")"
tmp="$(mktemp -d "$(dirname "$out")/.tfrecord-build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/classes/META-INF/services"

echo "build_tfrecord_jar: compiling ${#sources[@]} Scala files against $jars"
java -Xss8m -cp "${compiler_cp#:}" scala.tools.nsc.Main \
  -release 17 -deprecation -feature -classpath "$classpath" -d "$tmp/classes" "${sources[@]}" \
  || die "scalac failed"

# Spark finds the data sources (format("tfos-tfrecord"), "tfos-node-inputs", "tfos-driver") by this list.
printf '%s\n' tfos.spark.tfrecord.DefaultSource tfos.spark.cluster.NodeInputsSource tfos.spark.cluster.DriverCallSource \
  > "$tmp/classes/META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"
jar cf "$tmp/out.jar" -C "$tmp/classes" . || die "jar failed"
mv -f "$tmp/out.jar" "$out"

echo "build_tfrecord_jar: wrote $out in $(( $(date +%s) - start ))s"
