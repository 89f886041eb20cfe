//! The commands an operator runs: migrate and adopt, publish, the views (events, dead, stats,
//! stats --check, doctor, top), the changes by hand (edit, requeue, prune) with their audit trail,
//! `replay`, `bench`, and the producer snippets of examples/producers/.

mod adopt;
mod audit;
mod bench;
mod dead;
mod doctor;
mod edit;
mod events;
mod migrate;
mod producers;
mod prune;
mod publish;
mod replay;
mod requeue;
mod stats;
mod stats_check;
mod top;
