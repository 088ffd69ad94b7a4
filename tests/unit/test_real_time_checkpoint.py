"""A real-time run killed while Spark wrote a checkpoint log entry leaves the entry's temporary file; when no batch had
been committed yet, Spark refuses the next start ("commits should be empty on batch 0"). `tfos stream` removes them."""
from __future__ import annotations

from tfos_jobs.jobs.stream.driver.real_time import unfinished_log_writes
from tfos_jobs.storage import Storage


def test_only_the_temporary_files_of_unfinished_log_writes_are_found(tmp_path):
    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "commits").mkdir(parents=True)
    (checkpoint / "offsets").mkdir()
    (checkpoint / "sources" / "0").mkdir(parents=True)
    debris = ["commits/.0.e1c4b66c-c36b-4f35-9ca0-659aca0c12bb.tmp", "commits/..0.e1c4b66c-c36b-4f35-9ca0-659aca0c12bb.tmp.crc",
              "offsets/.3.0f0e.tmp"]
    kept = ["commits/2", "commits/.2.crc", "offsets/3", "offsets/.3.crc", "sources/0/.0.tmp", "metadata"]
    for name in debris + kept:
        (checkpoint / name).write_text("")

    storage = Storage(None)
    found = unfinished_log_writes(storage, storage.qualify(str(checkpoint)))

    assert sorted(found) == sorted(f"{storage.qualify(str(checkpoint))}/{d}" for d in debris)
    for path in found:
        storage.delete(path)
    left = sorted(str(p.relative_to(checkpoint)) for p in checkpoint.rglob("*") if p.is_file())
    assert left == sorted(kept)


def test_a_checkpoint_not_written_yet_has_none(tmp_path):
    storage = Storage(None)
    assert unfinished_log_writes(storage, storage.qualify(str(tmp_path / "new"))) == []
