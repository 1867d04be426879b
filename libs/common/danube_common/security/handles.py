"""Who may use a producer or consumer by its id (pure: the interceptor and the broker call it).

Producer and consumer ids are guessable (a counter seeded from the clock), so an id proves
nothing: with auth enabled the broker records the principal that created each producer
(CreateProducer) and consumer (Subscribe), and a call naming only an id (SendMessage,
PublishBatches, ReceiveMessages, ReceiveBatches, AckBatch without a topic, Seek, Close*,
HealthCheck) is allowed only to

- the principal that created the handle (the same ``type:name``; a cluster member proven by
  its certificate is not the same principal as a token claiming its name),
- a super admin, or a principal holding ``manage_topic`` on the handle's topic (operators
  who may delete the topic anyway may also close its producers and consumers),

and, in every case, only on top of the rule's own permission on the topic (checked first, so
a caller without it is told that). The same goes for a CreateProducer or Subscribe that would
take over an attached producer or consumer by its name: a name another principal holds is not
handed over. A handle with no recorded creator (the broker's own dead-letter producer) is
usable by the elevated principals only.
"""

from __future__ import annotations

from danube_common.errors import PermissionDenied
from danube_common.security.principal import Principal
from danube_common.security.rbac import Authorizer, Permission
from danube_common.security.rules import Handle, HandleInfo

#: Besides its creator, who may use a handle: holders of this permission on its topic.
ELEVATED_PERMISSION = Permission.MANAGE_TOPIC


def creator_of(principal: Principal) -> str:
    """How a handle records its creator: ``user:alice``; a cluster member proven by its
    certificate is marked, so a token that claims ``broker_internal:broker-1`` is not it."""
    name = str(principal)
    return f"{name} (certificate)" if principal.is_cluster_member else name


def check_handle_use(
    authorizer: Authorizer,
    principal: Principal,
    handle: Handle,
    info: HandleInfo,
    *,
    by_name: str | None = None,
) -> None:
    """Allow ``principal`` to use ``handle`` (see the module docstring); else PermissionDenied
    saying why and what to do. ``by_name``: the handle is being taken over by this name (a
    CreateProducer or Subscribe naming an attached producer or consumer)."""
    if info.creator is not None and info.creator == creator_of(principal):
        return
    if authorizer.check(principal, ELEVATED_PERMISSION, info.topic).allowed:
        return
    who = (
        f"only that principal, a super admin or a holder of {ELEVATED_PERMISSION.value} on "
        f"{info.topic} may use it"
    )
    if by_name is not None:
        raise PermissionDenied(
            f"{principal} may not take over {handle} ({by_name!r}) on {info.topic}: it belongs to "
            f"the principal that created it ({who}); choose another {handle.kind} name"
        )
    raise PermissionDenied(
        f"{principal} may not use {handle} on {info.topic}: it belongs to the principal that "
        f"created it ({who} by id); create your own {handle.kind}"
    )


__all__ = ["ELEVATED_PERMISSION", "HandleInfo", "check_handle_use", "creator_of"]
