"""FedAvg client (ALGORITHMS.md §4.1): plain local SGD x ← x − η_l (g + wd·x); uplink Δ_i = x_{i,K} − x^t.

Also the client of FedAdam / FedYogi / FedAdagrad (§4.3), whose difference is all on the server.
"""

from clients.base import FedClient


class FedAvgClient(FedClient):
    pass
