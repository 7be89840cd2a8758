"""Driving a whole run: the in-process engine and the stop note a launch leaves."""
