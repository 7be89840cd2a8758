"""The Flower side of the server: the adapter that makes a server rule (strategies/) a Flower `Strategy`, and the
pieces it is built from, one job per module: routing, reply validation, the run guard, per-round accounting and
recording, the pre-round query, checkpoints, round observers."""
