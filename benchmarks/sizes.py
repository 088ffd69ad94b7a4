"""How much data each benchmark uses. The full run is sized to finish in well under 20 minutes
on a 2-core machine; the smoke run only proves the harness works end to end."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    people: int  # people at 1x; the large data set has `scale` times as many
    scale: int
    events_per_person: float  # events rows = people x this: the bulk of what prepare reads
    repeats: int
    train_repeats: int  # training is the noisiest figure (seconds-long epochs on a shared machine)
    serving_repeats: int  # P4 and P9: each query lasts a second or two, so more repeats cost little
    warmup: bool  # one unrecorded run of each variant first (model loading, worker start, JIT)
    train_epochs: int  # training figures use the epochs after the first (the first traces)
    train_steps: int  # steps per epoch
    # examples per update (global batch): every strategy and worker count trains on it; 0 = the
    # config's own (batch_size x workers under multi_worker_mirrored: the demo's 2 x 1,024)
    train_batch: int
    ps_batch: int  # examples per parameter-server step for P8 (docs/training.md: larger batches under parameter_server)
    scaling_workers: tuple[int, ...]  # multi_worker_mirrored clusters measured
    profile_steps: int  # steps each TF node times its step's parts over (cluster.node.step_profile)
    input_records: int  # records read per input pipeline run (in batches of the global training batch)
    write_rounds: int  # times the JVM writers write the DataFrame per sample: one write lasts under a second
    fleet_assets: int  # sensor-fleet assets at 1x (P10); the large fleet has `scale` times as many
    fleet_steps: int  # time steps per asset
    p14_people: int  # P14's 1x people; its large side has 100 times as many (100,000: 10,000,000 people)
    p14_events_per_person: float
    p15_rows: int  # P15b: rows in the topic the stream and the batch UDF both score
    p15_rate: float  # P15a: events per second produced while the stream runs
    p15_seconds: float  # P15a: how long they are produced
    p16_large_mb: int  # P16b: each of the two train files at least this many MiB (1,536: the 1.5 GB files)
    p16_small_mb: int  # P16b: the same, on the small side
    p18_steps: int  # P18: steps per epoch, long enough for several step checkpoints in each
    p18_batch: int  # P18: examples per worker per step
    p19_rows: int  # P19: rows of the table with a text column
    p19_batch: int  # P19: training batch; the prediction function's batches are 10 times larger

    @property
    def big_people(self) -> int:
        return self.people * self.scale


FULL = Sizes(people=25_000, scale=16, events_per_person=10.0, repeats=3, train_repeats=3, serving_repeats=5, warmup=True,
             train_epochs=3, train_steps=200, train_batch=0, ps_batch=4096, scaling_workers=(1, 2, 3), profile_steps=60,
             input_records=819_200, write_rounds=4, fleet_assets=25, fleet_steps=4_000,
             p14_people=2_000, p14_events_per_person=2.0, p15_rows=200_000, p15_rate=1_500.0, p15_seconds=45.0,
             p16_large_mb=1536, p16_small_mb=50, p18_steps=1500, p18_batch=128, p19_rows=300_000,
             p19_batch=1024)
SMOKE = Sizes(people=300, scale=16, events_per_person=1.0, repeats=1, train_repeats=1, serving_repeats=1, warmup=False,
              train_epochs=2, train_steps=4, train_batch=64, ps_batch=64, scaling_workers=(1, 2), profile_steps=4,
              input_records=256, write_rounds=1, fleet_assets=2, fleet_steps=400,
              p14_people=200, p14_events_per_person=1.0, p15_rows=2_000, p15_rate=200.0, p15_seconds=9.0,
              p16_large_mb=48, p16_small_mb=8, p18_steps=300, p18_batch=32, p19_rows=3_000,
              p19_batch=64)
