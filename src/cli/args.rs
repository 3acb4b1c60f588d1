//! The flags several commands share, each kind in one place: `--db` ([`DbArgs`]), a
//! call's grants and limits ([`GrantArgs`]), and pip's sources ([`PipArgs`]).

mod db;
mod grant;
mod pip;

pub use db::DbArgs;
pub(super) use db::open_registry;
pub use grant::GrantArgs;
pub use pip::PipArgs;
