{
  "targets": [
    {
      "target_name": "kvshm",
      "sources": ["kvshm.c", "kvhash.c", "kvmatmul.c", "kvops.c", "kvmem.cc"],
      "defines": ["NAPI_VERSION=8"],
      "cflags": ["-O2", "-Wall", "-Wextra", "-ffp-contract=off"],
      "cflags_cc": ["-O2", "-Wall", "-Wextra"]
    }
  ]
}
