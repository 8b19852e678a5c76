"""Knowledge distillation: `kd_loss`, a learnable `Temperature`, the `Distiller` loss function, and the
teacher-logit cache (`build_cache`/`open_cache`). The `distill` recipe puts them together."""

from hotloop.distill.cache import build_cache, fingerprint_module, fingerprint_tensor, open_cache
from hotloop.distill.loss import (
    Distiller,
    DistillError,
    StudentWithTemperature,
    Temperature,
    kd_loss,
    logits_of,
    no_kv_cache,
)

__all__ = [
    "DistillError",
    "Distiller",
    "StudentWithTemperature",
    "Temperature",
    "build_cache",
    "fingerprint_module",
    "fingerprint_tensor",
    "kd_loss",
    "logits_of",
    "no_kv_cache",
    "open_cache",
]
