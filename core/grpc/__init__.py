"""gRPC glue shared by the servicers (`from_proto`, `paging`) and by both sides (`errors`,
`channel`, which import no Django)."""
