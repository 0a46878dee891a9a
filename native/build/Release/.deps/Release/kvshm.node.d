cmd_Release/kvshm.node := ln -f "Release/obj.target/kvshm.node" "Release/kvshm.node" 2>/dev/null || (rm -rf "Release/kvshm.node" && cp -af "Release/obj.target/kvshm.node" "Release/kvshm.node")
