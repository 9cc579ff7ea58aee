"""The errors the box-side scripts share between their modules (stdlib only, Python >= 3.8).

The probes and the patch helper are uploaded alone and cannot import remote/errors.py; what
they raise stays on the box (a probe prints it as its result, the helper as its answer).

    Exception
    ├── Stop            the model probe's resolution stopped at a known place (reason, file:line)
    ├── Partial         the layer-path walk stopped after some hops (the hops and the Stop)
    ├── HeadFileError   a head's file is not what it claims (a cut-short safetensors file)
    └── HelperError     the patch helper refuses an operation (its one-line answer)
"""


class Stop(Exception):
    """Resolution stopped at a known place; carries the reason and the file:line."""

    def __init__(self, reason, where=None, status="unresolved", key=None):
        Exception.__init__(self, reason)
        self.reason = reason
        self.where = where
        self.status = status  # "unresolved" | "needs_config"
        self.key = key  # the config.json key that would settle a needs_config stop


class Partial(Exception):
    def __init__(self, hops, stop):
        Exception.__init__(self, stop.reason)
        self.hops = hops
        self.stop = stop


class HelperError(Exception):
    pass


class HeadFileError(Exception):
    """A head's file cannot be read as what it claims to be (its one-line reason)."""
