"""Server halves of the algorithms, one module each, on the shared `fedsuite.rule.FedStrategy`."""
