"""``horovod.runner.util.threads.in_thread``: imported by Horovod's test/utils/common.py.

A minimal stand-in (start ``target`` on a thread, return the thread), written for this shim;
the two parallel suites never call it.
"""

import threading


def in_thread(target, args=(), name=None, daemon=True, silent=False):
    """Runs ``target(*args)`` on a new thread and returns that (started) thread."""
    def run():
        try:
            target(*args)
        except BaseException:
            if not silent:
                raise

    thread = threading.Thread(target=run, name=name, daemon=daemon)
    thread.start()
    return thread
