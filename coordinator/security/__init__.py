"""Kafka's security model, pure: ACLs and their authorizer (:mod:`acl`), SCRAM and PLAIN
(:mod:`scram`, :mod:`plain`), principals from certificates (:mod:`principal`) and the broker's
security settings (:mod:`settings`). Nothing here does I/O except :mod:`store`, which keeps ACLs
and SCRAM credentials in the warehouse; the gateway's wire side is
:mod:`coordinator.gateway.security`."""
