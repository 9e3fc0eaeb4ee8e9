"""HTTP glue: DRF error mapping, middleware, the body parser, filters, keyset cursors, OpenAPI postprocessing, rows rendered as JSON by the database, admin charts."""
