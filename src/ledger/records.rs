//! Typed reads and writes of the ledger tables; filled by the lead.
