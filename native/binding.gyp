{
  "targets": [
    {
      "target_name": "kvshm",
      "sources": ["kvshm.c", "kvhash.c"],
      "defines": ["NAPI_VERSION=8"],
      "cflags": ["-O2", "-Wall", "-Wextra"]
    }
  ]
}
