"""A verifier worker's Triton cache manager (TRITON_CACHE_MANAGER): Triton's file cache, and for a kernel launcher it
has not built, the pool's launcher store (launchers.py), which the worker reads and cannot write. Imported by Triton
in the worker, never by the pool."""

from __future__ import annotations

import os

from triton.runtime.cache import FileCacheManager

from drtriton_ray.verify.launchers import LAUNCHER_NAME, STORE_ENV


class StoreCacheManager(FileCacheManager):
    def get_file(self, filename):
        found = super().get_file(filename)
        store = os.environ.get(STORE_ENV)
        if found is None and store and filename.startswith(LAUNCHER_NAME):
            path = os.path.join(store, self.key, filename)
            return path if os.path.isfile(path) else None
        return found
