"""A bare DLPack capsule as a producer (`numpy.from_dlpack` takes objects with `__dlpack__`)."""


class Capsule:
    """Hands over one DLPack capsule of a CPU tensor."""

    def __init__(self, capsule):
        self._capsule = capsule

    def __dlpack__(self, **kwargs):
        capsule, self._capsule = self._capsule, None
        if capsule is None:
            raise BufferError("a DLPack capsule is consumed once")
        return capsule

    def __dlpack_device__(self):
        return (1, 0)
