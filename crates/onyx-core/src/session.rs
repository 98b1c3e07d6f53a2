//! Sessions: placeholder replaced below.
