"""Client halves of the algorithms, one module each, on the shared `clients.base.FedClient`."""
