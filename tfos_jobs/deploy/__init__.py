"""Getting the jobs onto a cluster (docs/deploy.md): `tfos submit` (spark-submit with the package's
jar, entry point and packed environment; kubernetes.py: what it sets for a `k8s://` master),
`tfos pack-env` (env_archive.py: the venv as a .tar.gz for --archives), and `tfos connect-server`
(connect_server.py: a Spark Connect server with what this package's clients need)."""
