"""Server halves of the algorithms, one module each, on the shared `strategies.base.FedStrategy`."""
