//! Fakes shared by the integration tests: model APIs the real agent CLIs are
//! pointed at, and replaying stand-ins for the CLIs themselves.
#![allow(dead_code)]

pub mod anthropic;
