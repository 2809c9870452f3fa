//! Placeholder: the fake-memory layer is built in issue 6.
