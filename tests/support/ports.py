"""Free loopback ports for the private clusters and stacks of the tests (the private Kafka
clusters take 20000-32000, the private Redis group of the stack tests 10000-20000: apart, so two
tests starting at once never pick the same port before either binds it).

Below the ephemeral range (32768-): no outgoing connection takes a port chosen here between the
check and the server's bind. A port is free when this process can bind it now.
"""

from __future__ import annotations

import random
import socket


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_run(count: int, low: int, high: int, *, step: int = 1) -> int:
    """A first port in [low, high) (a multiple of ``step`` from ``low``) with ``count`` free ports in a row."""
    for _ in range(500):
        first = random.randrange(low, high, step)
        if all(port_free(first + i) for i in range(count)):
            return first
    raise RuntimeError(f"no {count} free ports in a row between {low} and {high}")
