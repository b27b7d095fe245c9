"""The gateway's security edge: TLS contexts (:mod:`tls`), the per-connection session that
authenticates a client and answers "may this principal do that?" (:mod:`session`), where each
API is checked as Kafka's ``KafkaApis`` checks it (:mod:`enforce`), the ACL and SCRAM admin
APIs (:mod:`admin`), and the gateway's own credentials towards an upstream (:mod:`client`).
The model itself (ACLs, SCRAM, principals, settings, the store) is :mod:`coordinator.security`."""
