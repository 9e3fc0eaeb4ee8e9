"""What both the API server and the controllers know of clusters, with no Django and no cluster
connection: the clusters file (`config`), the accelerator table (`devices`) and the TaskSpec rules
each backend needs (`validation`)."""
