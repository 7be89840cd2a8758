"""FedAvg client (docs/algorithms/fedavg.md): plain local SGD x ← x − η_l (g + wd·x); uplink Δ_i = x_{i,K} − x^t.

Also the client of FedAdam / FedYogi / FedAdagrad (docs/algorithms/fedadam.md), whose difference is all on the server.
"""

from fedsuite.rules.client_rule import ClientRule


class FedAvgClient(ClientRule):
    pass
