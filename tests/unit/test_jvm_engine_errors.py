"""What `predict.engine` says when the JVM cannot score: the line a fallback or a refusal names, taken from a failed
query's message."""
from __future__ import annotations

from udfs import jvm_engine

MISSING_CLASS = """Job aborted due to stage failure: Task 0 in stage 17.0 failed 4 times, most recent failure: Lost task
0.3 in stage 17.0 (TID 33) (192.0.2.2 executor 0): java.lang.NoClassDefFoundError: org/tensorflow/Tensor
\tat tfos.udf.jvm.TFBatchEvalExec$Batches.$anonfun$scorings$4(TFPredict.scala:151)
Caused by: java.lang.ClassNotFoundException: org.tensorflow.Tensor
"""

MISSING_OP = """Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times, most recent failure: ...
Caused by: org.tensorflow.exceptions.TFInvalidArgumentException: Op type not registered 'DecodeWebP' in binary
"""


def test_executors_without_tensorflow_java_are_named_with_the_way_to_give_it_to_them():
    cause = jvm_engine._cause(MISSING_CLASS)
    assert cause == jvm_engine.NO_TFJAVA_ON_EXECUTORS
    assert "tfos connect-server" in cause and "--jars" in cause


def test_an_op_tensorflow_java_lacks_is_named_by_tensorflows_own_line():
    assert jvm_engine._cause(MISSING_OP) == "Op type not registered 'DecodeWebP' in binary"


PYTHON_WORKER = """An exception was thrown from the Python worker. Please see the stack trace below.
Traceback (most recent call last):
  File "/work/udfs/predict.py", line 212, in score
    except TypeError as e:
tensorflow.python.framework.errors_impl.InvalidArgumentError: Graph execution error:

  File "/usr/lib/python3/dist-packages/tensorflow/python/ops/script_ops.py", line 261, in __call__
    raise ValueError(f"Could not find callback with key={token} in the "
ValueError: Could not find callback with key=pyfunc_0 in the registry.
\tat org.apache.spark.util.SparkErrorUtils.tryWithSafeFinally(SparkErrorUtils.scala:86)
"""


def test_a_python_worker_failure_is_named_by_its_last_error_line():
    assert jvm_engine._python_cause(PYTHON_WORKER) == "ValueError: Could not find callback with key=pyfunc_0 in the registry."
