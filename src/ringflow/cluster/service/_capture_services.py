"""The node side of transmission (issue 14 §1-2), beside its ``ReplicaCapture``: the channel
watch (``_channel_watch``: each table sliced as its channels say), the publication of sealed
slices and seal watermarks (``_publication``) and synch-delete (``_synch_delete``, unless
``CaptureSettings.drop_sent_slices`` is off). Real nodes run them (``_process``); simulated
nodes capture and seal only (``tests/sim``: these rounds would add coordinated traffic to
every simulated history).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ringflow.cluster.service._channel_watch import ChannelWatch
from ringflow.cluster.service._publication import SlicePublisher
from ringflow.cluster.service._synch_delete import SynchDelete

if TYPE_CHECKING:
    from ringflow.cluster.service._node import ClusterNode
    from ringflow.cluster.service._settings import CaptureSettings


class CaptureServices:
    """Channel watch, publication and synch-delete of one node (module docstring)."""

    def __init__(self, cluster: ClusterNode, settings: CaptureSettings) -> None:
        self.channels = ChannelWatch(cluster, settings.slice_settings)
        self.publisher = SlicePublisher(cluster, self.channels.settings_for)
        self.synch_delete = (
            SynchDelete(cluster, self.channels) if settings.drop_sent_slices else None
        )

    def start(self) -> None:
        self.channels.start()
        self.publisher.start()
        if self.synch_delete is not None:
            self.synch_delete.start()

    def stop(self) -> None:
        if self.synch_delete is not None:
            self.synch_delete.stop()
        self.publisher.stop()
        self.channels.stop()

    def status(self) -> dict[str, object]:
        """What ``status.json``'s ``capture`` section adds: ``channels``, ``publication``,
        ``synch_delete`` (None when off)."""
        return {
            "channels": self.channels.status(),
            "publication": self.publisher.status(),
            "synch_delete": None if self.synch_delete is None else self.synch_delete.status(),
        }
