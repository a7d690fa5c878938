"""The run's deadline where llama.cpp can see it: between two steps of a decode.

llama.cpp's abort callback is libc's ``atoi`` over a flag that reads "1" once the deadline has passed; a timer
thread raises it. No Python runs inside a decode, so a signal's exception is never lost in C (the maintainers
page, "The run's clock inside a model call").
"""

from __future__ import annotations

import ctypes
import threading
import time


class DeadlineFlag:
    """A flag that reads "1" from the deadline on, for llama.cpp's abort callback to read without Python."""

    def __init__(self) -> None:
        self._text = ctypes.create_string_buffer(b"0", 2)
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    def callback(self, callback_type) -> tuple[object, int]:
        """(the callback, its data) for llama.cpp's context parameters: libc's atoi, reading this flag."""
        # the process's own symbols, libc's among them: no library search (a subprocess on some systems) at start-up
        return ctypes.cast(ctypes.CDLL(None).atoi, callback_type), ctypes.addressof(self._text)

    def set(self, deadline: float | None) -> None:
        """Lower the flag, and raise it at ``deadline`` (time.monotonic()); None: never."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._timer, self._text.value = None, b"0"
            if deadline is None:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                self._text.value = b"1"
                return
            timer = threading.Timer(left, self._raise)
            timer.daemon = True  # a run that ends leaves no thread behind it
            self._timer = timer
            timer.start()

    def _raise(self) -> None:
        with self._lock:
            if self._timer is threading.current_thread():  # a timer cancelled meanwhile raises nothing
                self._text.value = b"1"

    @property
    def raised(self) -> bool:
        return self._text.value == b"1"

    def close(self) -> None:
        self.set(None)
