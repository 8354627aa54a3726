"""Consumer applications of this project: `postbox consume consumers.<module>:app`."""
