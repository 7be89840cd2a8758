"""A round observer made of callbacks, for tests that watch a run (fedsuite.server.observers)."""

from __future__ import annotations

from fedsuite.server.observers import RoundObserver


class Watch(RoundObserver):
    """Calls the given functions on their events; `screen` may return a reason to reject a reply."""

    def __init__(self, queried=None, sent=None, screen=None, replied=None, aggregated=None, recorded=None):
        self._queried, self._sent, self._screen, self._replied = queried, sent, screen, replied
        self._aggregated, self._recorded = aggregated, recorded

    def sent(self, server_round, x, downlink):
        if self._sent:
            self._sent(server_round, x, downlink)

    def queried(self, server_round, x, answers):
        if self._queried:
            self._queried(server_round, x, answers)

    def screen(self, server_round, reply):
        return self._screen(server_round, reply) if self._screen else None

    def replied(self, server_round, replies):
        if self._replied:
            self._replied(server_round, replies)

    def aggregated(self, server_round, strategy, x_before, replies):
        if self._aggregated:
            self._aggregated(server_round, strategy, x_before, replies)

    def recorded(self, row):
        if self._recorded:
            self._recorded(row)


class Rows(RoundObserver):
    """Keeps every results row in memory."""

    def __init__(self):
        self.rows = []

    def recorded(self, row):
        self.rows.append(row)
