"""Counts a process's database round trips for `make bench` (on PYTHONPATH only for the processes under
test, and only when LEDGER_BENCH_ROUNDTRIPS names a directory).

A round trip is a statement outside a pipeline (one `Connection.wait`), or one pipeline sync: statements
queued in a pipeline share the round trip of its sync, so this counts what the network sees, where
pg_stat_statements counts statements. The count goes to `<dir>/<pid>` a few times a second.
"""

import os

_DIR = os.environ.get("LEDGER_BENCH_ROUNDTRIPS")

if _DIR:
    import importlib.abc
    import importlib.util
    import sys
    import threading

    _count = [0]

    def _patch(connection_module) -> None:
        cls = connection_module.Connection
        wait = cls.wait

        def counting_wait(self, *args, **kwargs):
            if self._pipeline is None:
                _count[0] += 1
            return wait(self, *args, **kwargs)

        cls.wait = counting_wait

        from psycopg import _pipeline

        pipeline = _pipeline.Pipeline
        sync, exit_ = pipeline.sync, pipeline.__exit__

        def counting_sync(self, *args, **kwargs):
            _count[0] += 1
            return sync(self, *args, **kwargs)

        def counting_exit(self, *args, **kwargs):
            if self.level == 1:  # the outermost block syncs when it ends
                _count[0] += 1
            return exit_(self, *args, **kwargs)

        pipeline.sync, pipeline.__exit__ = counting_sync, counting_exit
        threading.Thread(target=_writer, name="bench-roundtrips", daemon=True).start()

    def _writer() -> None:
        import time

        path = os.path.join(_DIR, str(os.getpid()))
        while True:
            with open(path + ".tmp", "w") as f:
                f.write(str(_count[0]))
            os.replace(path + ".tmp", path)
            time.sleep(0.1)

    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "psycopg.connection":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            exec_module = spec.loader.exec_module

            def exec_and_patch(module):
                exec_module(module)
                _patch(module)

            spec.loader.exec_module = exec_and_patch
            return spec

    sys.meta_path.insert(0, _Finder())
