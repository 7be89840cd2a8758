"""Secure aggregation (secagg=true, docs/privacy-secagg.md) among the client's round stages (fedsuite/stages/client.py):
the upload itself is masked by Flower's SecAgg+ mod (fedsuite/privacy/secagg_client.py), outside the fit; the stage
says that the clients of such a run train one at a time (each upload enters the secure sum on its own)."""

from __future__ import annotations

from fedsuite.stages.client import ClientStage


class SecureUpload(ClientStage):
    trains_alone = "secagg=true sends each client's upload into the secure sum on its own"
    handles_upload = True  # Flower's SecAgg+ mod masks the packed upload after the fit

    @classmethod
    def of_run(cls, cfg) -> SecureUpload | None:
        """The stage of a resolved run config under secagg=true, else None."""
        return cls() if cfg.secagg.on else None
