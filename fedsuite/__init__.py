"""fedsuite: federated optimisers as Flower apps. The folders and their jobs: docs/developer/architecture.md."""

from fedsuite import moved

moved.install()
