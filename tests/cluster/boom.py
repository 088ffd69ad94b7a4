"""A user model function that fails, as user code does: used to test failure handling."""


def build(spec, vocab, stats, model_cfg):
    raise ValueError("boom: this model function always fails")
