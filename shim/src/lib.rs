//! The preloadable shim (`libtessera.so`); interception lands with the shim issue.
