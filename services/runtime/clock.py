"""Cluster time: wall time, optionally sped up, shared by every process of one ``gangway up``.

``GANGWAY_CLOCK`` = ``"<wall epoch s>,<cluster epoch ms>,<scale>"``: cluster time is
``cluster epoch + (wall now - wall epoch) × scale``. Only shells read it; ``decide`` reads the
state's time (the newest event's), never this clock.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class ClusterClock:
    wall_epoch_s: float
    cluster_epoch_ms: int
    scale: float = 1.0

    @classmethod
    def starting_now(cls, scale: float = 1.0) -> "ClusterClock":
        now = time.time()
        return cls(now, int(now * 1000), scale)

    @classmethod
    def from_env(cls) -> "ClusterClock":
        text = os.environ.get("GANGWAY_CLOCK")
        if not text:
            return cls.starting_now()
        wall, cluster, scale = text.split(",")
        return cls(float(wall), int(cluster), float(scale))

    def to_env(self) -> str:
        return f"{self.wall_epoch_s!r},{self.cluster_epoch_ms},{self.scale!r}"

    def now_ms(self) -> int:
        return self.cluster_epoch_ms + int((time.time() - self.wall_epoch_s) * 1000 * self.scale)

    def wall_seconds_until(self, cluster_ms: int) -> float:
        return max(0.0, (cluster_ms - self.now_ms()) / 1000 / self.scale)
