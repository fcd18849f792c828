"""The node's pure cores composed into one state (issue 21 §2): events in, actions out.

``NodeState`` holds the gossiper (with its failure detector), the membership it feeds, the
hint manager, the coordinator, the schema versions (``SchemaVersions``), the CDC
generation decider (``GenerationDecider``), the schedules of the background CDC jobs
(``BackgroundJob``) and the node's topology change (``TopologyChange``), and settles
between them what one core's decision means for another, with no I/O: a peer going up or
down is news for the hints and for the drivers; a changed gossip state rebuilds the
membership, whose news of a peer (its schema version, that it is up) goes to the hints; a
peer gossiping another schema version is asked for its schema; our own new version is
gossiped and told to the hints. What is left is for the shell (``ClusterNode``), carried out
by the node's one ``ActionExecutor``:

* ``Send`` (a gossip message), ``ClientEvent`` (STATUS_CHANGE, TOPOLOGY_CHANGE),
  ``WritePeers`` (``system.peers``), ``PeerRefused`` (logged);
* ``PullSchema``: ask a peer for its schema (the schema sync sends SCHEMA_PULL_REQ);
* ``SettleAgreement``: once per batch in which liveness or a schema version changed (waiters
  for schema agreement look again);
* the hint manager's actions of a round (``HintAction``);
* the CDC generation decider's actions of a round (``GenerationAction``: propose, learn,
  load, publish, hold or release CDC writes), carried out by ``CdcGenerationService``, which
  feeds their outcomes back to the decider;
* ``RunJob``: a background job over the CDC tables is due and the cluster ready (the expiry
  of old generations, the v1 -> v2 streams rewrite: ``BackgroundJob``), run by its service,
  which tells the job when the run ended;
* the topology change's actions (``TopologyAction``: make the changed ring's generation,
  stream, restream for a removal, persist a finished join, save the bootstrap state, exit),
  carried out by ``TopologyService``, which feeds their outcomes back (``topology_event``). The
  gossip states the change sets are its own; the membership is rebuilt from them here, and the
  generation it makes goes to the generation decider from here.

The coordinator is held here so that the node's invariants are checked in one place
(``validate``, after every simulated event); its requests are begun and answered by the
shell's helpers (``PointRequests``), their actions run by the same executor.

Events: ``round`` (the gossip round: the gossiper's tick, then the hints' dispatch and the
schema pulls due), ``received`` (a gossip message), ``ring_changed`` (the ring built at
start), ``schema_changed`` (our schema version changed), ``topology_event`` (a
``TopologyEvent``: a round of the topology change, once the round's actions are carried out,
an operator's request, the outcome of one of its actions); each takes the times it needs, so
the same state runs on a process's clock and on the simulator's.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ringflow.cluster._coordinator import Coordinator
from ringflow.cluster._gossip import (
    GossipAction,
    Gossiper,
    NodeDown,
    NodeJoined,
    NodeRestarted,
    NodeUp,
    Send,
    StateChanged,
)
from ringflow.cluster._gossip_state import ApplicationState, GossipMessage
from ringflow.cluster._hints import HintAction, HintManager
from ringflow.cluster.service._cdc_decider import (
    BackgroundJob,
    GenerationAction,
    GenerationDecider,
    RunJob,
    cluster_ready,
    member_views,
)
from ringflow.cluster.service._membership import (
    ClientEvent,
    Membership,
    PeerRefused,
    PeerSeen,
    WritePeers,
)
from ringflow.cluster.service._schema_versions import PullSchema, SchemaVersions
from ringflow.cluster.service._topology_state import (
    Adopted,
    Refused,
    RingChanged,
    RingState,
    TopologyAction,
    TopologyChange,
    TopologyEvent,
)
from ringflow.errors import invariant


@dataclass(frozen=True, slots=True)
class SettleAgreement:
    """Liveness or a peer's schema version changed: schema agreement may have changed."""


NodeAction = (
    Send
    | ClientEvent
    | WritePeers
    | PeerRefused
    | PullSchema
    | SettleAgreement
    | HintAction
    | GenerationAction
    | RunJob
    | TopologyAction
    | Refused
)
"""What ``NodeState`` leaves to the shell (module docstring)."""


class NodeState:
    """The node's gossiper, membership, hints, coordinator, schema versions, CDC generation
    decider, background CDC jobs and topology change (module docstring)."""

    def __init__(
        self,
        gossiper: Gossiper,
        membership: Membership,
        hints: HintManager,
        coordinator: Coordinator,
        schema: SchemaVersions,
        generations: GenerationDecider,
        topology: TopologyChange,
        jobs: Sequence[BackgroundJob] = (),
    ) -> None:
        self.gossiper = gossiper
        self.membership = membership
        self.hints = hints
        self.coordinator = coordinator
        self.schema = schema
        self.generations = generations
        self.topology = topology
        self.jobs = tuple(jobs)
        self._gossip_steps: dict[type, Callable[[Any, _Batch], None]] = {
            Send: _pass_on,
            NodeUp: self._liveness,
            NodeDown: self._liveness,
            StateChanged: self._state_changed,
            NodeJoined: _nothing,  # what it changes comes with StateChanged and NodeUp
            NodeRestarted: _nothing,
        }

    def round(self, gossip_now_ms: int, now_ms: int, now_us: int) -> list[NodeAction]:
        """The gossip round: the gossiper's tick at ``gossip_now_ms`` (its monotonic time),
        what it means, then the hints' dispatch at ``now_ms``, a pull from every live peer
        still gossiping another schema version when its pull is due, and the CDC
        generations' round over what gossip now shows (learn, propose, hold or release
        CDC writes), then the background CDC jobs due."""
        actions = self._gossip(self.gossiper.tick(gossip_now_ms), now_ms, now_us)
        actions.extend(self.hints.tick(now_ms))
        actions.extend(self.schema.recheck(self._live_versions(), now_ms))
        gossiper = self.gossiper
        views = member_views(gossiper.endpoint_states(), gossiper.is_alive)
        actions.extend(self.generations.on_tick(views, gossiper.seeds, now_ms))
        if self.jobs:
            ready = cluster_ready(views, gossiper.seeds)
            actions.extend(RunJob(job.name) for job in self.jobs if job.due(ready, now_ms))
        return actions

    def received(
        self,
        source: str,
        message: GossipMessage,
        gossip_now_ms: int,
        now_ms: int,
        now_us: int,
    ) -> list[NodeAction]:
        """A gossip message from ``source``, and what it means."""
        return self._gossip(self.gossiper.receive(source, message, gossip_now_ms), now_ms, now_us)

    def ring_changed(self, now_ms: int, now_us: int) -> list[NodeAction]:
        """The membership rebuilt from gossip (once, at start)."""
        batch = _Batch(now_ms)
        self._refresh(batch, now_us)
        return batch.actions

    def topology_event(self, event: TopologyEvent, now_ms: int, now_us: int) -> list[NodeAction]:
        """What ``event`` means for the topology change, and for the other cores: a STATUS or
        removal it set rebuilds the membership, a generation it made goes to the generation
        decider; the rest, in order, is for the shell (``Refused`` answers an operator)."""
        ring = RingState(
            self.gossiper, self.membership, self.schema_agreement, self.generations.loaded
        )
        actions: list[NodeAction] = []
        for step in self.topology.handle(event, now_ms, ring):
            if isinstance(step, RingChanged):
                batch = _Batch(now_ms)
                self._refresh(batch, now_us)
                actions.extend(batch.actions)
            elif isinstance(step, Adopted):
                actions.extend(self.generations.on_proposed(step.generation, now_ms))
            else:
                actions.append(step)
        return actions

    def schema_changed(self, version: uuid.UUID) -> list[NodeAction]:
        """Our schema version is now ``version`` (a DDL here, or a merge that changed it):
        gossiped, told to the hints (a hint waits for its target to agree), and agreement
        settled."""
        self.gossiper.set_application_state(ApplicationState.SCHEMA, str(version))
        self.hints.set_local_schema_version(version)
        self.schema.changed(version)
        return [SettleAgreement()]

    def schema_disagreement(self) -> dict[str, str | None]:
        """The live nodes gossiping another schema version than ours (or none yet): their
        address (RPC address when known) and the version they gossip."""
        return self.schema.disagreement(
            self.gossiper.live_endpoints(), self._gossiped_version, self._address_of
        )

    def validate(self) -> None:
        """The invariants of every core: gossip and failure detection, the membership, the
        coordinator with every request and hint it holds, the schema versions (never a pull
        from this node, our version the one we gossip), the CDC generations, the background
        jobs, the topology change."""
        self.gossiper.validate()
        self.membership.validate()
        self.coordinator.validate()
        self.schema.validate()
        self.generations.validate()
        for job in self.jobs:
            job.validate()
        self.topology.validate()
        gossiped = self._gossiped_version(self.gossiper.local_endpoint)
        invariant(
            gossiped == self.schema.version,
            lambda: f"schema version {self.schema.version}, gossiped {gossiped}",
        )

    def schema_agreement(self) -> bool:
        """Every live node gossips our schema version."""
        return not self.schema_disagreement()

    def _gossiped_version(self, endpoint: str) -> str | None:
        state = self.gossiper.endpoint_state(endpoint)
        versioned = None if state is None else state.get(ApplicationState.SCHEMA)
        return None if versioned is None else versioned.value

    def _live_versions(self) -> list[tuple[str, str]]:
        found = []
        for endpoint in self.gossiper.live_endpoints():
            version = self._gossiped_version(endpoint)
            if version is not None:
                found.append((endpoint, version))
        return found

    def _address_of(self, endpoint: str) -> str:
        info = self.membership.members.get(endpoint)
        return endpoint.rsplit(":", 1)[0] if info is None else info.rpc_address

    # --- what one core's decisions mean for the others ------------------------------------

    def _gossip(
        self, gossip_actions: Iterable[GossipAction], now_ms: int, now_us: int
    ) -> list[NodeAction]:
        batch = _Batch(now_ms)
        steps = self._gossip_steps
        for action in gossip_actions:
            steps[type(action)](action, batch)
        if batch.ring_changed:
            self._refresh(batch, now_us)
        if batch.agreement_may_change:
            batch.actions.append(SettleAgreement())
        return batch.actions

    def _liveness(self, action: NodeUp | NodeDown, batch: _Batch) -> None:
        """A member going up or down: the hints hold or replay its hints, the drivers hear
        STATUS_CHANGE. Liveness is part of schema agreement (live nodes must agree)."""
        batch.agreement_may_change = True
        info = self.membership.members.get(action.endpoint)
        if info is None:
            return
        up = type(action) is NodeUp
        if up:
            self.hints.on_node_up(info.host.host_id, batch.now_ms)
        else:
            self.hints.on_node_down(info.host.host_id, batch.now_ms)
        batch.actions.append(ClientEvent("STATUS_CHANGE", "UP" if up else "DOWN", info.rpc_address))

    def _state_changed(self, action: StateChanged, batch: _Batch) -> None:
        batch.ring_changed = True
        if action.app_state is ApplicationState.SCHEMA:
            batch.agreement_may_change = True
            pull = self.schema.peer_version(action.endpoint, action.value, batch.now_ms)
            if pull is not None:
                batch.actions.append(pull)

    def _refresh(self, batch: _Batch, now_us: int) -> None:
        """The membership rebuilt from gossip; its news of a peer goes to the hints here, the
        rest to the shell."""
        gossiper = self.gossiper
        states = gossiper.endpoint_states()
        self.schema.forget([e for e in self.schema.pulled() if e not in states])
        news = self.membership.refresh(states, gossiper.is_alive, now_us)
        for action in news:
            if isinstance(action, PeerSeen):
                self._peer_seen(action, batch.now_ms)
            else:
                batch.actions.append(action)

    def _peer_seen(self, action: PeerSeen, now_ms: int) -> None:
        if action.schema_version is not None:
            self.hints.on_schema_version(action.host_id, action.schema_version)
        if action.alive:
            self.hints.on_node_up(action.host_id, now_ms)


class _Batch:
    """What a batch of gossip actions has decided so far."""

    __slots__ = ("actions", "agreement_may_change", "now_ms", "ring_changed")

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms
        self.actions: list[NodeAction] = []
        self.ring_changed = False
        self.agreement_may_change = False


def _pass_on(action: Send, batch: _Batch) -> None:
    batch.actions.append(action)


def _nothing(_action: object, _batch: _Batch) -> None:
    pass
