"""A readers–writer lock: many readers at once, one writer alone; a waiting writer keeps new readers out (so a
stream of searches cannot starve a write)."""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator


class ReadWriteLock:
    def __init__(self):
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._waiting_writers = 0

    @contextmanager
    def read(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._writer and not self._waiting_writers)
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        with self._cond:
            self._waiting_writers += 1
            try:
                self._cond.wait_for(lambda: not self._writer and not self._readers)
            finally:
                self._waiting_writers -= 1
                if not self._waiting_writers:
                    self._cond.notify_all()  # readers held back by this writer may go on if it gave up
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()
