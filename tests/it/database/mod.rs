//! The server side: the PostgreSQL versions supported, TLS and authentication, a hot standby,
//! and least privilege (each use's grants).

mod grants;
mod standby;
mod tls;
mod versions;
