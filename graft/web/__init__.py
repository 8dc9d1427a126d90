"""`graft serve`: a local web explorer of an index (`graft.web.app`, over `graft.web.data.Explorer`)."""
