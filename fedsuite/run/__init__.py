"""Driving a whole run: the composition root every surface builds its run with (compose), the in-process engine and
its secure-sum arithmetic, and the stop note a launch leaves."""
