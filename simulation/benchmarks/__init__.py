"""What the suite costs: Flower's overhead over a bare loop, the local loop alone, a launch's peak memory
(docs/performance.md)."""
