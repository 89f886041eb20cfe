//! What several commands share, below them: the commands in `cmd` never import each other, they
//! call down into these modules, which call down into `db` (all the SQL) and never up into `cmd`.
//!
//! - [`audit`]: who makes a change and why (`--actor`, `--reason`);
//! - [`batch`]: select, dry run, confirm, change in short batches, report (`dead discard`,
//!   `requeue`, `events cancel|reschedule` by filters);
//! - [`change`]: changing events by id all or nothing (`events cancel|reschedule|edit`);
//! - [`view`]: how events look (lists, tables, one event's detail);
//! - [`select`]: the dead ids a selection means, and filters checked against the database;
//! - [`signals`]: how `relay` and `replay` stop on a signal;
//! - [`sink`]: the sink of `relay` and `replay`, from the flags they share;
//! - [`stats`]: the figures `stats`, `doctor`, `demo` and `top` read;
//! - [`top`]: the samples `top` draws (its figures, throughput, relays and dead letters);
//! - [`publish`] and [`new_event`]: bulk publish (`publish --file`, `bench`, `demo`) and the
//!   validation of one new event.

pub mod audit;
pub mod batch;
pub mod change;
pub mod new_event;
pub mod publish;
pub mod select;
pub mod signals;
pub mod sink;
pub mod stats;
pub mod top;
pub mod view;
