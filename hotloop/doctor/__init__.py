"""Diagnostics that find where a training loop waits on the host.

`hostreads.HostReadCounter` records every host read of a tensor value (the operations that force a
device sync on CUDA) with the user's file and line; it works on any device, the CPU included.
"""

from hotloop.doctor.hostreads import HostRead, HostReadCounter

__all__ = ["HostRead", "HostReadCounter"]
