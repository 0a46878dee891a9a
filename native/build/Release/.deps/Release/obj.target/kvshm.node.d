cmd_Release/obj.target/kvshm.node := g++ -o Release/obj.target/kvshm.node -shared -pthread -rdynamic -m64  -Wl,-soname=kvshm.node -Wl,--start-group Release/obj.target/kvshm/kvshm.o -Wl,--end-group 
