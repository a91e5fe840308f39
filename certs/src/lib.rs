//! Self-managed TLS for the webhook and the routers: CA and serving certificates kept in a Secret, rotated before expiry.
